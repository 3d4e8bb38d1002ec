"""TerminalResponseMiddleware (spec 000, number 37): no silent empty answers.

Some providers return an empty final ``AIMessage`` (no text, no tool calls)
right after tool results, and the run would end as a blank "success". When
that happens this middleware retries the model once with a hidden recovery
prompt (request only); if the second answer is empty too, it is replaced in
state by a visible error message marked ``deerflow_run_outcome: "error"`` and a
``run_error`` custom stream event is emitted, so clients see the run failed.

Safety-stopped responses (``content_filter`` and friends) are not "empty" in
this sense: the provider gave its reason, and SafetyFinishReasonMiddleware
owns them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from middlewares.model_response import (
    finish_reason,
    has_tool_call_intent,
    has_visible_content,
    last_ai_message,
    replace_last_ai_message,
)
from runtime.messages import RUN_OUTCOME_KEY

__all__ = [
    "FALLBACK_TEXT",
    "RECOVERY_PROMPT",
    "RUN_OUTCOME_KEY",
    "TerminalResponseMiddleware",
    "is_empty_terminal",
]

logger = logging.getLogger(__name__)

RECOVERY_PROMPT = (
    "<system-reminder>Your previous reply was empty. Using the tool results above, "
    "write your answer to the user now, or call a tool if more work is needed."
    "</system-reminder>"
)
FALLBACK_TEXT = (
    "The model returned an empty response twice after using its tools, so this run ended "
    "without an answer. Please try again or rephrase the request."
)
SAFETY_REASONS = ("content_filter", "safety", "refusal", "recitation", "prohibited_content")


def is_empty_terminal(message: AIMessage | None) -> bool:
    """An answer with neither visible text nor any tool call."""
    return (
        message is not None
        and not has_tool_call_intent(message)
        and not has_visible_content(message)
    )


def _after_tool_execution(messages: Sequence[AnyMessage]) -> bool:
    """Whether the latest visible message is a tool result (hidden context skipped)."""
    for message in reversed(messages):
        if (message.additional_kwargs or {}).get("hide_from_ui"):
            continue
        return isinstance(message, ToolMessage)
    return False


class TerminalResponseMiddleware(AgentMiddleware[Any, Any]):
    """Retry an empty post-tool answer once, then fail visibly."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    @staticmethod
    def _needs_recovery(request: ModelRequest[Any], response: Any) -> bool:
        message = last_ai_message(response)
        if not is_empty_terminal(message) or finish_reason(message) in SAFETY_REASONS:
            return False
        return _after_tool_execution(request.messages)

    @staticmethod
    def _recovery_request(request: ModelRequest[Any]) -> ModelRequest[Any]:
        prompt = HumanMessage(
            content=RECOVERY_PROMPT,
            additional_kwargs={
                "hide_from_ui": True,
                "deerflow_content_kind": "terminal_recovery",
                "deerflow_producer_kind": "terminal_response",
            },
        )
        return request.override(messages=[*request.messages, prompt])

    @staticmethod
    def _finish(response: Any) -> Any:
        message = last_ai_message(response)
        if not is_empty_terminal(message):
            return response
        assert message is not None
        logger.warning("model returned an empty answer twice after tool execution")
        kwargs = {
            **(message.additional_kwargs or {}),
            RUN_OUTCOME_KEY: "error",
            "deerflow_terminal_fallback": True,
        }
        fallback = message.model_copy(
            update={"content": FALLBACK_TEXT, "additional_kwargs": kwargs}
        )
        try:
            from langgraph.config import get_stream_writer

            get_stream_writer()({"type": "run_error", "reason": "empty_terminal_response"})
        except Exception:  # outside a graph run there is no stream to write to
            logger.debug("no stream writer for the run_error event")
        return replace_last_ai_message(response, fallback)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        response = handler(request)
        if not self._needs_recovery(request, response):
            return response
        return self._finish(handler(self._recovery_request(request)))  # type: ignore[no-any-return]

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        response = await handler(request)
        if not self._needs_recovery(request, response):
            return response
        return self._finish(await handler(self._recovery_request(request)))  # type: ignore[no-any-return]
