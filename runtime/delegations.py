"""The delegation ledger: ``ThreadState.delegations``, keyed by ``(run_id, tool_call_id)``.

Why a ledger: the per-run subagent budget, the parent's link to remote child
threads and the cancellation of orphaned delegations all need durable facts
about dispatched tasks that survive compaction of ``messages``.

The persisted values are untrusted (a client can write thread state, and old
checkpoints may hold older shapes): every reader revalidates them through
``validate_delegation`` and ignores what does not validate. The reducer keeps
malformed persisted entries untouched (nothing is lost) but never lets them
take part in merging or counting.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NotRequired, cast

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from typing_extensions import TypedDict

from runtime.delegation_contract import (
    DELEGATION_STATUSES,
    STOP_REASONS,
    TERMINAL_STATUSES,
    DelegationStatus,
    StopReason,
    read_task_result_metadata,
)

__all__ = [
    "Delegation",
    "cancel_orphaned_delegations",
    "count_run_delegations",
    "current_run_id",
    "delegation_key",
    "merge_delegations",
    "read_delegations",
    "validate_delegation",
]

logger = logging.getLogger(__name__)

_MAX_ID = 256
_TEXT_LIMITS = {"description": 200, "summary": 500, "error": 500}
_ID_FIELDS = ("child_thread_id", "child_run_id", "model", "subagent_type", "updated_at")
_EXECUTIONS = ("inprocess", "remote")


class Delegation(TypedDict):
    """One dispatched ``task`` call, as the ledger records it."""

    run_id: str | None
    tool_call_id: str
    status: DelegationStatus
    subagent_type: NotRequired[str]
    description: NotRequired[str]
    execution: NotRequired[Literal["inprocess", "remote"]]
    model: NotRequired[str]
    stop_reason: NotRequired[StopReason]
    summary: NotRequired[str]
    error: NotRequired[str]
    child_thread_id: NotRequired[str]
    child_run_id: NotRequired[str]
    updated_at: NotRequired[str]


def _bounded(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _id_or_none(value: Any) -> tuple[bool, str | None]:
    """(valid, value) for an optional identifier."""
    if value is None:
        return True, None
    if isinstance(value, str) and 0 < len(value) <= _MAX_ID:
        return True, value
    return False, None


def validate_delegation(raw: Any) -> Delegation | None:
    """A clean copy of ``raw`` or None when it is malformed.

    Required: ``tool_call_id`` (non-empty string), ``run_id`` (string or None),
    ``status`` (one of ``DELEGATION_STATUSES``). Optional fields of the wrong
    type are dropped; text is bounded. Status is never inferred from text.
    """
    if not isinstance(raw, Mapping):
        return None
    tool_call_id = raw.get("tool_call_id")
    if not isinstance(tool_call_id, str) or not 0 < len(tool_call_id) <= _MAX_ID:
        return None
    if "run_id" not in raw:
        run_ok, run_id = True, None
    else:
        run_ok, run_id = _id_or_none(raw.get("run_id"))
    if not run_ok:
        return None
    status = raw.get("status")
    if not isinstance(status, str) or status not in DELEGATION_STATUSES:
        return None
    entry: dict[str, Any] = {"run_id": run_id, "tool_call_id": tool_call_id, "status": status}
    for key in _ID_FIELDS:
        ok, value = _id_or_none(raw.get(key))
        if ok and value is not None:
            entry[key] = value
    for key, limit in _TEXT_LIMITS.items():
        value = raw.get(key)
        if isinstance(value, str) and value.strip():
            entry[key] = _bounded(value, limit)
    execution = raw.get("execution")
    if isinstance(execution, str) and execution in _EXECUTIONS:
        entry["execution"] = execution
    stop_reason = raw.get("stop_reason")
    if isinstance(stop_reason, str) and stop_reason in STOP_REASONS:
        entry["stop_reason"] = stop_reason
    return cast(Delegation, entry)


def delegation_key(entry: Delegation) -> tuple[str | None, str]:
    return (entry["run_id"], entry["tool_call_id"])


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    logger.warning("delegations: ignoring an update that is not a list (%s)", type(value).__name__)
    return []


def _merge_entry(old: Delegation, new: Delegation) -> Delegation:
    """Later facts win, except that a settled (terminal) entry never changes again."""
    if old["status"] in TERMINAL_STATUSES:
        return old
    merged: dict[str, Any] = {**old, **new}
    return cast(Delegation, merged)


def merge_delegations(existing: Any, new: Any) -> list[Any]:
    """Reducer of ``ThreadState.delegations``.

    Valid new entries replace the valid entry with the same
    ``(run_id, tool_call_id)`` (or are appended); malformed new entries are
    dropped with a log line; malformed existing entries stay where they are.
    """
    result: list[Any] = list(_as_list(existing))
    index: dict[tuple[str | None, str], int] = {}
    for position, item in enumerate(result):
        valid = validate_delegation(item)
        if valid is not None:
            index[delegation_key(valid)] = position
    for item in _as_list(new):
        valid = validate_delegation(item)
        if valid is None:
            logger.warning("delegations: dropping a malformed entry from an update")
            continue
        key = delegation_key(valid)
        if key in index:
            current = validate_delegation(result[index[key]])
            result[index[key]] = _merge_entry(current, valid) if current is not None else valid
        else:
            index[key] = len(result)
            result.append(valid)
    return result


def read_delegations(state: Mapping[str, Any] | Any) -> list[Delegation]:
    """The valid ledger entries of ``state``; malformed ones are skipped."""
    raw = state.get("delegations") if isinstance(state, Mapping) else None
    entries: list[Delegation] = []
    for item in _as_list(raw):
        valid = validate_delegation(item)
        if valid is None:
            logger.debug("delegations: ignoring a malformed persisted entry")
            continue
        entries.append(valid)
    return entries


def current_run_id(config: RunnableConfig | Mapping[str, Any] | None) -> str | None:
    """The server's run id (``configurable.run_id``), else ``metadata.run_id``."""
    if not config:
        return None
    for section in ("configurable", "metadata"):
        values = config.get(section)
        if isinstance(values, Mapping):
            ok, run_id = _id_or_none(values.get("run_id"))
            if ok and run_id is not None:
                return run_id
    return None


def count_run_delegations(entries: Iterable[Delegation], run_id: str | None) -> int:
    """How many delegations the run ``run_id`` has dispatched.

    Without a run id the runs of a thread cannot be told apart, so entries
    without one are all counted (conservatively).
    """
    return sum(1 for entry in entries if entry["run_id"] == run_id)


def _reply_status(message: ToolMessage) -> tuple[str, str | None] | None:
    """The status a reply's metadata records, if it records a valid one."""
    meta = read_task_result_metadata(message.additional_kwargs)
    if meta is None:
        return None
    return meta["status"], meta.get("stop_reason")


def cancel_orphaned_delegations(
    entries: Sequence[Delegation],
    run_id: str | None,
    messages: Sequence[BaseMessage],
) -> list[Delegation]:
    """Updates that close earlier runs' unanswered delegations.

    A new run means earlier runs are over: a non-terminal entry of another run
    with no reply is ``cancelled``. A reply whose metadata records a terminal
    status settles the entry with that status; a legacy reply without status
    metadata leaves it as it is (status is never inferred from reply text).
    Entries without a run id, and the current run's own, are left alone.
    """
    if run_id is None:
        return []
    replies: dict[str, ToolMessage] = {}
    for message in messages:
        if isinstance(message, ToolMessage) and isinstance(message.tool_call_id, str):
            replies[message.tool_call_id] = message
    updates: list[Delegation] = []
    for entry in entries:
        if entry["run_id"] is None or entry["run_id"] == run_id:
            continue
        if entry["status"] in TERMINAL_STATUSES:
            continue
        reply = replies.get(entry["tool_call_id"])
        if reply is None:
            update: dict[str, Any] = {
                **entry,
                "status": "cancelled",
                "error": "The run that dispatched this task ended before the task finished.",
            }
            updates.append(cast(Delegation, update))
            continue
        settled = _reply_status(reply)
        if settled is None or settled[0] not in TERMINAL_STATUSES:
            continue
        update = {**entry, "status": settled[0]}
        if settled[1] is not None:
            update["stop_reason"] = settled[1]
        updates.append(cast(Delegation, update))
    return updates
