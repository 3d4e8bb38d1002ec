"""Small real tools for tests that must not depend on the sandbox."""

from __future__ import annotations

from langchain_core.tools import tool

__all__ = ["echo"]


@tool
async def echo(text: str) -> str:
    """Return the text unchanged (a test tool)."""
    return f"echo: {text}"
