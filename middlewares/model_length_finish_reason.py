"""ModelLengthFinishReasonMiddleware (spec 000, number 38): a length-capped answer ends the loop.

When the provider stopped because the output hit its length limit
(``finish_reason`` ``length`` / ``max_tokens``), any tool call in the answer is
likely truncated. The answer's tool calls are removed from every field (via
``clone_ai_message_with_tool_calls``), a visible notice is appended even when
partial text exists, content blocks are preserved, and the message is stamped
``stop_reason: "model_length_capped"`` and ``model_length_termination: True``
in ``additional_kwargs`` so downstream guards stand down. The rewritten answer
is what enters state, and with no tool calls the agent loop ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse

from middlewares.model_response import (
    append_visible_text,
    finish_reason,
    has_tool_call_intent,
    last_ai_message,
    replace_last_ai_message,
)
from middlewares.tool_call_args import clone_ai_message_with_tool_calls

__all__ = [
    "LENGTH_FINISH_REASONS",
    "LENGTH_NOTICE",
    "MODEL_LENGTH_TERMINATION_KEY",
    "ModelLengthFinishReasonMiddleware",
    "cap_length_response",
]

LENGTH_FINISH_REASONS: tuple[str, ...] = (
    "length",
    "max_tokens",
    "max_output_tokens",
    "model_length",
)
MODEL_LENGTH_TERMINATION_KEY = "model_length_termination"
STOP_REASON = "model_length_capped"
LENGTH_NOTICE = (
    "[This answer was cut off because it reached the model's output length limit"
    "{calls}. Ask to continue if you need the rest.]"
)


def cap_length_response(response: Any) -> Any:
    """``response`` with a length-capped answer rewritten (unchanged otherwise)."""
    message = last_ai_message(response)
    if message is None or finish_reason(message) not in LENGTH_FINISH_REASONS:
        return response
    if (message.additional_kwargs or {}).get(MODEL_LENGTH_TERMINATION_KEY) is True:
        return response
    had_calls = has_tool_call_intent(message)
    capped = clone_ai_message_with_tool_calls(message, []) if had_calls else message
    capped = append_visible_text(
        capped, LENGTH_NOTICE.format(calls="; its tool calls were not run" if had_calls else "")
    )
    kwargs = {
        **(capped.additional_kwargs or {}),
        "stop_reason": STOP_REASON,
        MODEL_LENGTH_TERMINATION_KEY: True,
    }
    return replace_last_ai_message(
        response, capped.model_copy(update={"additional_kwargs": kwargs})
    )


class ModelLengthFinishReasonMiddleware(AgentMiddleware[Any, Any]):
    """End the tool loop cleanly when the model's output was length-capped."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return cap_length_response(handler(request))  # type: ignore[no-any-return]

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return cap_length_response(await handler(request))  # type: ignore[no-any-return]
