"""Tools that fail in the ways ToolProgress classifies, counting how often they really ran."""

from __future__ import annotations

from collections import Counter

from langchain_core.tools import tool

__all__ = ["CALLS", "flaky", "lookup", "unsupported"]

CALLS: Counter[str] = Counter()


@tool
async def flaky(query: str) -> str:
    """Times out every time (a retryable failure)."""
    CALLS["flaky"] += 1
    raise TimeoutError("the upstream service timed out")


@tool
async def lookup(path: str) -> str:
    """Finds only /ok (other paths are a recoverable not-found)."""
    CALLS["lookup"] += 1
    if path != "/ok":
        raise FileNotFoundError(f"no such file: {path}")
    return "found"


@tool
async def unsupported(mode: str) -> str:
    """Fails in a way the model cannot fix (a stop-category failure)."""
    CALLS["unsupported"] += 1
    raise NotImplementedError(f"mode {mode} is not supported")
