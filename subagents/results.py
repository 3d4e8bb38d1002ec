"""``TaskOutcome``: one delegated task's result, rendered for every consumer.

The lead's ``ToolMessage`` text, its ``additional_kwargs``, the ledger entry
and the terminal stream event are all generated from the same fields here, so
no consumer hand-writes a second protocol string (spec 15).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import ToolMessage

from subagents.contract import (
    KEY_CHILD_RUN_ID,
    KEY_CHILD_THREAD_ID,
    KEY_CITATIONS,
    KEY_ERROR,
    KEY_EXECUTION,
    KEY_MODEL_NAME,
    KEY_STATUS,
    KEY_STOP_REASON,
    KEY_SUBAGENT_TYPE,
    KEY_TASK_ID,
    KEY_TOKEN_USAGE,
    TASK_TOOL_NAME,
    DelegationStatus,
    StopReason,
    TokenUsage,
)
from subagents.ledger import Delegation, validate_delegation

__all__ = ["TERMINAL_EVENTS", "TaskOutcome"]

# The custom stream event that closes a task, per terminal status.
TERMINAL_EVENTS: dict[str, str] = {
    "completed": "task_completed",
    "failed": "task_failed",
    "timed_out": "task_timed_out",
    "cancelled": "task_cancelled",
}

_STOP_LABELS: dict[str, str] = {
    "token_capped": "its token budget ran out",
    "turn_capped": "it reached its turn limit",
    "loop_capped": "it was stopped in a repeated tool-call loop",
}

_EVENT_RESULT_LIMIT = 500


@dataclass(frozen=True)
class TaskOutcome:
    """What happened to one ``task`` call."""

    task_id: str
    status: DelegationStatus
    subagent_type: str
    description: str = ""
    execution: str = "inprocess"
    result: str | None = None
    error: str | None = None
    stop_reason: StopReason | None = None
    model: str | None = None
    token_usage: TokenUsage | None = None
    child_thread_id: str | None = None
    child_run_id: str | None = None
    citations: dict[str, Any] | None = None
    """Receipt citations of the terminal answer, verified against the ledger it saw."""

    def text(self) -> str:
        """The model-visible result: the status first, then the result or error."""
        label = f"subagent {self.subagent_type!r}"
        capped = _STOP_LABELS.get(self.stop_reason or "")
        if self.status == "completed":
            head = f"Task completed by {label}"
            if capped:
                head += f" (stopped early: {capped}; the result may be partial)"
            body = (self.result or "").strip() or "(the subagent returned no text)"
            return f"{head}. Result:\n{body}"
        detail = (self.error or "").strip()
        if self.status == "timed_out":
            head = f"Task timed out ({label})"
        elif self.status == "cancelled":
            head = f"Task cancelled ({label})"
        else:
            head = f"Task failed ({label})"
            if capped:
                head += f": {capped} before it produced a result"
        return f"{head}. Error: {detail}" if detail else f"{head}."

    def additional_kwargs(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            KEY_STATUS: self.status,
            KEY_TASK_ID: self.task_id,
            KEY_SUBAGENT_TYPE: self.subagent_type,
            KEY_EXECUTION: self.execution,
        }
        if self.stop_reason is not None:
            payload[KEY_STOP_REASON] = self.stop_reason
        if self.status != "completed" and self.error:
            payload[KEY_ERROR] = self.error
        if self.model:
            payload[KEY_MODEL_NAME] = self.model
        if self.token_usage is not None:
            payload[KEY_TOKEN_USAGE] = dict(self.token_usage)
        if self.child_thread_id:
            payload[KEY_CHILD_THREAD_ID] = self.child_thread_id
        if self.child_run_id:
            payload[KEY_CHILD_RUN_ID] = self.child_run_id
        if self.citations and self.citations.get("citations"):
            payload[KEY_CITATIONS] = self.citations
        return payload

    def tool_message(self) -> ToolMessage:
        return ToolMessage(
            content=self.text(),
            tool_call_id=self.task_id,
            name=TASK_TOOL_NAME,
            status="success" if self.status == "completed" else "error",
            additional_kwargs=self.additional_kwargs(),
        )

    def ledger_entry(self, run_id: str | None) -> Delegation | None:
        """The ledger's record of this outcome (None if the ids cannot be recorded)."""
        raw: dict[str, Any] = {
            "run_id": run_id,
            "tool_call_id": self.task_id,
            "status": self.status,
            "subagent_type": self.subagent_type,
            "description": self.description,
            "execution": self.execution,
            "model": self.model,
            "stop_reason": self.stop_reason,
            "summary": self.result if self.status == "completed" else None,
            "error": self.error if self.status != "completed" else None,
            "child_thread_id": self.child_thread_id,
            "child_run_id": self.child_run_id,
            "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        return validate_delegation(raw)

    def event(self) -> dict[str, Any]:
        """The terminal custom stream event."""
        payload: dict[str, Any] = {
            "type": TERMINAL_EVENTS[self.status],
            "task_id": self.task_id,
            "status": self.status,
            "subagent_type": self.subagent_type,
            "description": self.description,
            "execution": self.execution,
        }
        if self.status == "completed":
            result = (self.result or "").strip()
            payload["result"] = result[:_EVENT_RESULT_LIMIT]
        elif self.error:
            payload["error"] = self.error
        if self.stop_reason is not None:
            payload["stop_reason"] = self.stop_reason
        if self.model:
            payload["model"] = self.model
        if self.token_usage is not None:
            payload["token_usage"] = dict(self.token_usage)
        if self.child_thread_id:
            payload["child_thread_id"] = self.child_thread_id
        if self.child_run_id:
            payload["child_run_id"] = self.child_run_id
        return payload
