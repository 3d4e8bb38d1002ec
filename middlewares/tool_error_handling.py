"""ToolErrorHandlingMiddleware (spec 000, number 15): a failing tool never aborts a run.

A tool that raises becomes an error ``ToolMessage`` the model can read and act
on, and every result (success, error, or a ``Command`` carrying the result) is
stamped with ``deerflow_tool_meta`` through
``tool_result_meta.normalize_tool_result``. The exception text shown to the
model is bounded; the traceback goes to the log, not to the model.
Interrupts (``GraphBubbleUp``) and cancellation propagate untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from middlewares._tool_results import map_tool_messages
from middlewares.tool_result_meta import TOOL_META_KEY, normalize_tool_result

__all__ = ["ERROR_TEXT_LIMIT", "ToolErrorHandlingMiddleware", "tool_error_message"]

logger = logging.getLogger(__name__)

ERROR_TEXT_LIMIT = 2000


def tool_error_message(request: ToolCallRequest, error: Exception) -> ToolMessage:
    """The error result for a tool call that raised, stamped with its meta."""
    name = request.tool_call.get("name") or "tool"
    detail = str(error).strip() or type(error).__name__
    if len(detail) > ERROR_TEXT_LIMIT:
        detail = detail[:ERROR_TEXT_LIMIT] + " ... [truncated]"
    message = ToolMessage(
        content=f"Error: the tool `{name}` failed ({type(error).__name__}): {detail}",
        tool_call_id=request.tool_call.get("id") or "",
        name=name,
        status="error",
    )
    stamped = normalize_tool_result(message, error=error, source="tool_error_handling")
    meta = stamped.additional_kwargs[TOOL_META_KEY]
    hint = meta.get("recommended_next_action")
    if hint:
        stamped = stamped.model_copy(update={"content": f"{stamped.content}\n{hint}"})
    return stamped


class ToolErrorHandlingMiddleware(AgentMiddleware[Any, Any]):
    """Convert tool exceptions into error results; stamp every result's meta."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def _stamp(self, request: ToolCallRequest, result: Any) -> Any:
        return map_tool_messages(
            result,
            lambda message: normalize_tool_result(message, source="tool"),
            tool_call_id=request.tool_call.get("id"),
        )

    def _failed(self, request: ToolCallRequest, error: Exception) -> ToolMessage:
        logger.warning(
            "tool %s (call %s) raised %s",
            request.tool_call.get("name"),
            request.tool_call.get("id"),
            type(error).__name__,
            exc_info=error,
        )
        return tool_error_message(request, error)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        try:
            result = handler(request)
        except GraphBubbleUp:
            raise
        except Exception as error:
            return self._failed(request, error)
        return self._stamp(request, result)  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        try:
            result = await handler(request)
        except GraphBubbleUp:
            raise
        except Exception as error:
            return self._failed(request, error)
        return self._stamp(request, result)  # type: ignore[no-any-return]
