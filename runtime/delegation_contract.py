"""The wire contract of delegation: statuses, stop reasons and result metadata keys.

Clients (and later middlewares such as TokenUsage) read these facts from a
``task`` ``ToolMessage``'s ``additional_kwargs`` and from ``task_*`` custom
stream events; the names are fixed here so producers and readers agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, get_args

from typing_extensions import TypedDict

__all__ = [
    "DELEGATION_STATUSES",
    "KEY_CHILD_RUN_ID",
    "KEY_CHILD_THREAD_ID",
    "KEY_CITATIONS",
    "KEY_ERROR",
    "KEY_EXECUTION",
    "KEY_MODEL_NAME",
    "KEY_STATUS",
    "KEY_STOP_REASON",
    "KEY_SUBAGENT_TYPE",
    "KEY_TASK_ID",
    "KEY_TOKEN_USAGE",
    "STOP_REASONS",
    "TASK_TOOL_NAME",
    "TERMINAL_STATUSES",
    "DelegationStatus",
    "StopReason",
    "TaskResultMetadata",
    "TokenUsage",
    "normalize_token_usage",
    "read_task_result_metadata",
]

TASK_TOOL_NAME = "task"

DelegationStatus = Literal["pending", "running", "completed", "failed", "cancelled", "timed_out"]
StopReason = Literal["token_capped", "turn_capped", "loop_capped"]

DELEGATION_STATUSES: tuple[str, ...] = get_args(DelegationStatus)
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timed_out"})
STOP_REASONS: tuple[str, ...] = get_args(StopReason)

KEY_STATUS = "subagent_status"
KEY_STOP_REASON = "subagent_stop_reason"
KEY_ERROR = "subagent_error"
KEY_MODEL_NAME = "subagent_model_name"
KEY_TOKEN_USAGE = "subagent_token_usage"
KEY_SUBAGENT_TYPE = "subagent_type"
KEY_TASK_ID = "subagent_task_id"
KEY_EXECUTION = "subagent_execution"
KEY_CHILD_THREAD_ID = "subagent_child_thread_id"
KEY_CHILD_RUN_ID = "subagent_child_run_id"
KEY_CITATIONS = "subagent_citations"


class TokenUsage(TypedDict):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class TaskResultMetadata(TypedDict):
    status: DelegationStatus
    stop_reason: NotRequired[StopReason]
    error: NotRequired[str]
    model: NotRequired[str]
    token_usage: NotRequired[TokenUsage]


def normalize_token_usage(value: Any) -> TokenUsage | None:
    """The three counters as non-negative ints, or None for anything else."""
    if not isinstance(value, Mapping):
        return None
    counts: dict[str, int] = {}
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        amount = value.get(key)
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            return None
        counts[key] = amount
    return TokenUsage(
        input_tokens=counts["input_tokens"],
        output_tokens=counts["output_tokens"],
        total_tokens=counts["total_tokens"],
    )


def read_task_result_metadata(additional_kwargs: Any) -> TaskResultMetadata | None:
    """Revalidate the structured facts of a ``task`` result (None if absent or bad)."""
    if not isinstance(additional_kwargs, Mapping):
        return None
    status = additional_kwargs.get(KEY_STATUS)
    if not isinstance(status, str) or status not in DELEGATION_STATUSES:
        return None
    meta = TaskResultMetadata(status=status)  # type: ignore[typeddict-item]
    stop_reason = additional_kwargs.get(KEY_STOP_REASON)
    if isinstance(stop_reason, str) and stop_reason in STOP_REASONS:
        meta["stop_reason"] = stop_reason  # type: ignore[typeddict-item]
    error = additional_kwargs.get(KEY_ERROR)
    if isinstance(error, str) and error.strip():
        meta["error"] = error
    model = additional_kwargs.get(KEY_MODEL_NAME)
    if isinstance(model, str) and model.strip():
        meta["model"] = model
    usage = normalize_token_usage(additional_kwargs.get(KEY_TOKEN_USAGE))
    if usage is not None:
        meta["token_usage"] = usage
    return meta
