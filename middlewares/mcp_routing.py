"""McpRoutingMiddleware (spec 27): promote deferred tools the user's message names.

Once per run (``before_agent``), the latest real user message is matched
against the deferred catalog: a tool whose name appears in it (as written, or
with ``_`` read as a space) is promoted into ``ThreadState.promoted`` before
DeferredToolFilterMiddleware looks, without running anything, so "use
get_forecast for Paris" works without a ``tool_search`` round trip. New names
emit ``middleware:tool_promotion`` with ``source: routing_hint``; names already
promoted with the same schema emit nothing. In a subagent, the latest real user
message is the delegated task's prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime

from middlewares._run_scope import emit_event, is_subagent_run
from middlewares._text import content_text
from tools.deferred import PROMOTION_EVENT, promoted_of, schema_hash

__all__ = ["McpRoutingMiddleware", "routed_tools"]


def _latest_user_text(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        kwargs = message.additional_kwargs or {}
        if isinstance(message, HumanMessage) and not kwargs.get("hide_from_ui"):
            if kwargs.get("deerflow_content_kind"):
                continue
            original = kwargs.get("original_user_content")
            return original if isinstance(original, str) else content_text(message.content)
    return ""


def routed_tools(catalog: Sequence[BaseTool], text: str) -> list[BaseTool]:
    """Deferred tools whose name the text names."""
    lowered = text.lower()
    found = []
    for tool in catalog:
        name = tool.name.lower()
        spaced = name.replace("_", " ")
        pattern = rf"(?<![a-z0-9_])({re.escape(name)}|{re.escape(spaced)})(?![a-z0-9_])"
        if re.search(pattern, lowered):
            found.append(tool)
    return found


class McpRoutingMiddleware(AgentMiddleware[Any, Any]):
    """Promote deferred tools named by the latest user message, once per run.

    Args:
        catalog: returns the agent's deferred tools (called once per run).
    """

    deerflow_fusable = True  # hooks never interrupt: may share a node

    def __init__(self, *, catalog: Callable[[], Sequence[BaseTool]]) -> None:
        super().__init__()
        self._catalog = catalog

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"match": "tool name in the latest user message"}

    def _route(self, state: Any) -> dict[str, Any] | None:
        text = _latest_user_text((state or {}).get("messages") or [])
        if not text:
            return None
        promoted = promoted_of(state)
        fresh = {
            tool.name: digest
            for tool in routed_tools(self._catalog(), text)
            if promoted.get(tool.name) != (digest := schema_hash(tool))
        }
        if not fresh:
            return None
        event: dict[str, Any] = {
            "type": PROMOTION_EVENT,
            "source": "routing_hint",
            "names": sorted(fresh),
        }
        if is_subagent_run():
            event["is_subagent"] = True
        emit_event(event)
        return {"promoted": fresh}

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._route(state)

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._route(state)
