"""Read messages that arrive either as ``BaseMessage`` objects (in-process) or as
the server's JSON dicts (remote), so both execution modes report identically."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from runtime.messages import LLM_ERROR_KEY, RUN_OUTCOME_KEY, content_text
from runtime.receipts import read_ledger_snapshot, verify_citations
from subagents.contract import STOP_REASONS, StopReason, TokenUsage

__all__ = [
    "ai_messages",
    "error_ending",
    "final_text",
    "message_id",
    "message_text",
    "stop_reason_of",
    "sum_token_usage",
    "terminal_citations",
    "tool_call_names",
]


def _get(message: Any, name: str) -> Any:
    if isinstance(message, BaseMessage):
        return getattr(message, name, None)
    if isinstance(message, Mapping):
        return message.get(name)
    return None


def _is_ai(message: Any) -> bool:
    if isinstance(message, AIMessage):
        return True
    if not isinstance(message, Mapping):
        return False
    kind = message.get("type")  # remote JSON: may be any value, even unhashable
    return isinstance(kind, str) and kind in ("ai", "AIMessageChunk")


def ai_messages(messages: Any) -> list[Any]:
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return []
    return [m for m in messages if _is_ai(m)]


def message_id(message: Any) -> str | None:
    value = _get(message, "id")
    return value if isinstance(value, str) and value else None


def message_text(message: Any) -> str:
    """The visible text of a message: string content or its text blocks."""
    return content_text(_get(message, "content"))


def tool_call_names(message: Any) -> list[str]:
    calls = _get(message, "tool_calls")
    if not isinstance(calls, list):
        return []
    names = []
    for call in calls:
        name = call.get("name") if isinstance(call, Mapping) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names


def final_text(messages: Any) -> str | None:
    """The text of the last AI message that has any (None if there is none)."""
    for message in reversed(ai_messages(messages)):
        text = message_text(message).strip()
        if text:
            return text
    return None


def error_ending(messages: Any) -> str | None:
    """The error text when the run ended in a marked error fallback, else None.

    LLMErrorHandlingMiddleware answers a failed model call with a fallback
    message (``deerflow_llm_error``) and TerminalResponseMiddleware replaces a
    repeated empty answer (``deerflow_run_outcome: "error"``): the run
    "succeeds" but the subagent failed, and its result must say so.
    """
    found = ai_messages(messages)
    if not found:
        return None
    last = found[-1]
    kwargs = _get(last, "additional_kwargs")
    if not isinstance(kwargs, Mapping):
        return None
    if kwargs.get(LLM_ERROR_KEY) is not None or kwargs.get(RUN_OUTCOME_KEY) == "error":
        return message_text(last).strip() or "the subagent's model call failed"
    return None


def stop_reason_of(messages: Any) -> StopReason | None:
    """A guard's stop reason stamped on the last AI message, if any."""
    found = ai_messages(messages)
    if not found:
        return None
    last = found[-1]
    for holder in (_get(last, "additional_kwargs"), _get(last, "response_metadata")):
        if isinstance(holder, Mapping):
            value = holder.get("stop_reason")
            if isinstance(value, str) and value in STOP_REASONS:
                return value  # type: ignore[return-value]
    return None


def sum_token_usage(messages: Iterable[Any] | Any) -> TokenUsage | None:
    """Cumulative usage of the AI messages; None when none reported usage."""
    totals = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    seen = False
    for message in ai_messages(messages):
        usage = _get(message, "usage_metadata")
        if not isinstance(usage, Mapping):
            continue
        for key in totals:
            amount = usage.get(key)
            if isinstance(amount, int) and not isinstance(amount, bool) and amount >= 0:
                totals[key] += amount
                seen = True
    if not seen:
        return None
    return TokenUsage(
        input_tokens=totals["input_tokens"],
        output_tokens=totals["output_tokens"],
        total_tokens=totals["total_tokens"],
    )


def terminal_citations(messages: Any) -> dict[str, Any] | None:
    """Receipt citations of the final answer, checked against the ledger that turn saw.

    The citing turn is the last AI message with text; its ``deerflow_receipt_ledger``
    snapshot names the receipts it was shown (spec 15). None when it cites nothing.
    """
    for message in reversed(ai_messages(messages)):
        text = message_text(message).strip()
        if not text:
            continue
        report = verify_citations(text, read_ledger_snapshot(message), list(messages))
        return report if report["citations"] else None
    return None
