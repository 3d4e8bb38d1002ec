"""Shared by the deferred-tool middlewares (27-29) and ``tool_search``: what is deferred, and hashes.

A deferred tool is one whose metadata says ``deferred`` (MCP tools by default,
configured tools with ``deferred: true``). A promotion records the hash of the
schema that was promoted, so a tool whose schema changed since (a new MCP
server version) is hidden again until it is promoted anew.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

__all__ = [
    "PROMOTION_EVENT",
    "deferred_tools",
    "is_deferred",
    "promoted_of",
    "schema_hash",
    "tool_name",
]

PROMOTION_EVENT = "middleware:tool_promotion"
_hashes: dict[int, tuple[BaseTool, str]] = {}


def tool_name(tool: Any) -> str | None:
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
        name = tool.get("name")
        return name if isinstance(name, str) else None
    return None


def is_deferred(tool: Any) -> bool:
    return isinstance(tool, BaseTool) and bool((tool.metadata or {}).get("deferred"))


def schema_hash(tool: BaseTool) -> str:
    """A short hash of the tool's model-visible schema (cached per tool object)."""
    cached = _hashes.get(id(tool))
    if cached is not None and cached[0] is tool:
        return cached[1]
    schema = convert_to_openai_tool(tool)
    digest = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:16]
    if len(_hashes) > 4096:
        _hashes.clear()
    _hashes[id(tool)] = (tool, digest)
    return digest


def promoted_of(state: Any) -> dict[str, str]:
    promoted = state.get("promoted") if isinstance(state, Mapping) else None
    return dict(promoted) if isinstance(promoted, Mapping) else {}


def deferred_tools(tools: Iterable[Any]) -> list[BaseTool]:
    return [t for t in tools if is_deferred(t)]
