"""``consume_stop_reason``: the one way a guard ends a run early with a visible answer.

Why shared: LoopDetection (``loop_capped``) and TokenBudget (``token_capped``)
both turn the model's last answer into a final one. Doing it in one place keeps
the contract identical for clients and for the subagent executor, which reads
``stop_reason`` back (``subagents.messages.stop_reason_of``): every tool call is
removed (structured, raw and content-block), a visible note is appended,
``finish_reason`` becomes ``stop`` and ``additional_kwargs["stop_reason"]`` is
stamped. A message already stamped keeps its first reason (first guard wins).
"""

from __future__ import annotations

from langchain_core.messages import AIMessage

from middlewares.model_response import append_visible_text
from middlewares.tool_call_args import clone_ai_message_with_tool_calls
from subagents.contract import STOP_REASONS, StopReason

__all__ = ["STOP_REASON_KEY", "consume_stop_reason", "stop_reason_of_message"]

STOP_REASON_KEY = "stop_reason"


def stop_reason_of_message(message: AIMessage) -> str | None:
    value = (message.additional_kwargs or {}).get(STOP_REASON_KEY)
    return value if isinstance(value, str) and value in STOP_REASONS else None


def consume_stop_reason(message: AIMessage, reason: StopReason, note: str) -> AIMessage:
    """``message`` as the run's final answer, stopped for ``reason`` with ``note`` shown."""
    if reason not in STOP_REASONS:
        raise ValueError(f"unknown stop reason {reason!r}; expected one of {STOP_REASONS}")
    if stop_reason_of_message(message) is not None and not message.tool_calls:
        return message
    stopped = clone_ai_message_with_tool_calls(message, [])
    stopped = append_visible_text(stopped, note)
    return stopped.model_copy(
        update={
            "additional_kwargs": {**(stopped.additional_kwargs or {}), STOP_REASON_KEY: reason},
            "response_metadata": {**(stopped.response_metadata or {}), "finish_reason": "stop"},
        }
    )
