"""DeferredToolFilterMiddleware (spec 29): deferred tools stay hidden until promoted.

With ``tool_search.enabled``, deferred tools (MCP tools by default, configured
tools marked ``deferred``) are registered with the agent, so the tool node can
run them, but their schemas are removed from every model request until the
thread's ``promoted`` state holds the tool's name with the hash of its current
schema (``tool_search`` or McpRoutingMiddleware put it there). A call to a
hidden tool is answered with an error tool result that points at
``tool_search``; it never runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from middlewares._tool_meta import blocked_tool_message
from tools.deferred import is_deferred, promoted_of, schema_hash

__all__ = ["DeferredToolFilterMiddleware"]

ToolResult = ToolMessage | Command[Any]


def _visible(tool: Any, promoted: dict[str, str]) -> bool:
    return not is_deferred(tool) or promoted.get(tool.name) == schema_hash(tool)


class DeferredToolFilterMiddleware(AgentMiddleware[Any, Any]):
    """Hide unpromoted deferred tool schemas; refuse calls to them."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"hash_scoped": True}

    def _filtered(self, request: ModelRequest) -> ModelRequest:
        if not request.tools or not any(is_deferred(t) for t in request.tools):
            return request
        promoted = promoted_of(request.state)
        kept = [t for t in request.tools if _visible(t, promoted)]
        return request.override(tools=kept) if len(kept) != len(request.tools) else request

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._filtered(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(self._filtered(request))

    def _hidden(self, request: ToolCallRequest) -> ToolMessage | None:
        tool = request.tool
        if tool is None or _visible(tool, promoted_of(request.state)):
            return None
        name = str(request.tool_call.get("name") or tool.name)
        return blocked_tool_message(
            content=(
                f"Error: {name} is not available yet. Call tool_search with what you need "
                "(for example its name) to make it available, then call it."
            ),
            tool_call_id=str(request.tool_call.get("id") or ""),
            name=name,
            error_type="unknown_tool",
            source="deferred_tool_filter",
        )

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        return self._hidden(request) or handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        refused = self._hidden(request)
        return refused if refused is not None else await handler(request)
