"""``deerflow_tool_meta`` for results the guard middlewares (12, 13) produce themselves.

The guards short-circuit calls *outside* ToolErrorHandlingMiddleware (spec 15),
so they stamp their own results, through the one shared stamping function
(``tool_result_meta.normalize_tool_result``) so every producer writes the same
five keys with the same vocabulary.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage

from middlewares.tool_result_meta import TOOL_META_KEY, normalize_tool_result

__all__ = ["TOOL_META_KEY", "blocked_tool_message", "ensure_tool_meta"]


def blocked_tool_message(
    *,
    content: str,
    tool_call_id: str,
    name: str,
    error_type: str,
    source: str,
    extra_kwargs: dict[str, Any] | None = None,
) -> ToolMessage:
    """An error ``ToolMessage`` for a call a guard refused to run."""
    message = ToolMessage(
        content=content,
        tool_call_id=tool_call_id,
        name=name,
        status="error",
        additional_kwargs=dict(extra_kwargs or {}),
    )
    return normalize_tool_result(message, error_type=error_type, source=source)


def ensure_tool_meta(message: ToolMessage) -> ToolMessage:
    """``message`` with ``deerflow_tool_meta``; an existing valid stamp is kept as is."""
    return normalize_tool_result(message)
