"""ToolResultSanitizationMiddleware (spec 000, number 3): inert markers in fetched content.

A fetched page is attacker-controlled: it can contain ``<system-reminder>`` or
chat-template tokens that try to pass as trusted framework context. For
remote-content tools only (``web_fetch``, ``web_search``, ``image_search``,
``web_capture``, and every tool carrying the ``deerflow_mcp`` metadata tag, so
an MCP server naming its fetcher ``fetch_url`` is still covered) the markers in
the result text are neutralised with the shared guard, and the rewrite is
recorded with ``append_tool_transform``. Local tool output (bash, read_file) is
left untouched. It sits inner of ToolOutputBudgetMiddleware, so an
externalised full output is already neutralised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from middlewares._tool_results import apply_sized, map_tool_messages, with_text
from middlewares.tool_transform_meta import append_tool_transform
from runtime.untrusted_content import neutralize_untrusted_tags_counted

__all__ = [
    "MCP_METADATA_TAG",
    "REMOTE_CONTENT_TOOLS",
    "ToolResultSanitizationMiddleware",
    "is_remote_content_tool",
    "sanitize_tool_message",
]

REMOTE_CONTENT_TOOLS: tuple[str, ...] = ("web_fetch", "web_search", "image_search", "web_capture")
MCP_METADATA_TAG = "deerflow_mcp"


def is_remote_content_tool(name: Any, tool: BaseTool | None = None) -> bool:
    """Whether a tool's results are remote (attacker-controllable) content."""
    if isinstance(name, str) and name in REMOTE_CONTENT_TOOLS:
        return True
    if tool is None:
        return False
    metadata = tool.metadata if isinstance(tool.metadata, dict) else {}
    if metadata.get(MCP_METADATA_TAG):
        return True
    tags = tool.tags if isinstance(tool.tags, list) else []
    return MCP_METADATA_TAG in tags


def sanitize_tool_message(message: ToolMessage, *, producer: str) -> ToolMessage:
    """Neutralise markers in a remote tool result; record the transform if any changed."""
    total = 0

    def rewrite(text: str) -> str:
        nonlocal total
        cleaned, count = neutralize_untrusted_tags_counted(text)
        total += count
        return cleaned

    cleaned = with_text(message, rewrite)
    if not total:
        return message
    return append_tool_transform(
        cleaned,
        kind="neutralize_untrusted_tags",
        producer=producer,
        details={"markers": total},
    )


class ToolResultSanitizationMiddleware(AgentMiddleware[Any, Any]):
    """Neutralise framework/injection markers in remote-content tool results."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def _apply(self, request: ToolCallRequest, result: Any) -> Any:
        if not is_remote_content_tool(request.tool_call.get("name"), request.tool):
            return result
        return map_tool_messages(
            result,
            lambda message: sanitize_tool_message(message, producer=self.name),
            tool_call_id=request.tool_call.get("id"),
        )

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self._apply(request, handler(request))  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        return await apply_sized(result, self._apply, request, result)  # type: ignore[no-any-return]
