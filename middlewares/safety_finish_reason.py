"""SafetyFinishReasonMiddleware (spec 000, number 39, optional): no tools after a safety stop.

When the provider safety-terminated a response (``finish_reason`` such as
``content_filter``), tool calls in it are untrustworthy and must not run. In
``after_model`` the last answer's tool calls are removed from every field, a
visible notice is appended, and the answer is stamped ``safety_termination``.
It is registered after the terminal-response, custom and configured
middlewares, so LangChain's reverse-order ``after_model`` dispatch runs it
before loop detection and subagent accounting see the calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from middlewares.model_response import (
    append_visible_text,
    finish_reason,
    has_tool_call_intent,
    has_visible_content,
)
from middlewares.tool_call_args import clone_ai_message_with_tool_calls, message_tool_call_ids

__all__ = ["SAFETY_NOTICE", "SAFETY_TERMINATION_KEY", "SafetyFinishReasonMiddleware"]

SAFETY_TERMINATION_KEY = "safety_termination"
SAFETY_NOTICE = "[The model provider stopped this response for safety reasons ({reason}){calls}.]"


class SafetyFinishReasonMiddleware(AgentMiddleware[Any, Any]):
    """Suppress tool execution after a provider safety stop."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(self, finish_reasons: Sequence[str]) -> None:
        super().__init__()
        self.finish_reasons = tuple(reason.lower() for reason in finish_reasons)

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"enabled": True, "finish_reasons": list(self.finish_reasons)}

    def _check(self, state: Any) -> dict[str, Any] | None:
        messages = state.get("messages") if isinstance(state, dict) else None
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        message: AIMessage = messages[-1]
        reason = finish_reason(message)
        if reason is None or reason not in self.finish_reasons:
            return None
        if SAFETY_TERMINATION_KEY in (message.additional_kwargs or {}):
            return None
        had_calls = has_tool_call_intent(message)
        if not had_calls and has_visible_content(message):
            return None
        suppressed = len(message_tool_call_ids(message)) if had_calls else 0
        cleaned = clone_ai_message_with_tool_calls(message, []) if had_calls else message
        cleaned = append_visible_text(
            cleaned,
            SAFETY_NOTICE.format(
                reason=reason, calls="; its tool calls were not run" if had_calls else ""
            ),
        )
        kwargs = {
            **(cleaned.additional_kwargs or {}),
            SAFETY_TERMINATION_KEY: {"finish_reason": reason, "suppressed_tool_calls": suppressed},
        }
        return {"messages": [cleaned.model_copy(update={"additional_kwargs": kwargs})]}

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._check(state)

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._check(state)
