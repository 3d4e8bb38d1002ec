"""SubagentLimitMiddleware (spec 31): caps on ``task`` calls, and the ledger's capture.

Present only when subagents are enabled for the run. After each model
response it keeps at most ``max_per_response`` ``task`` calls and no more than
the run's remaining budget (``max_total_per_run`` minus the delegations this run
already has in ``ThreadState.delegations``). Excess calls are stripped, the
response's ``finish_reason`` is forced to ``stop`` and a visible note is
appended, so the agent synthesises the results it already has. The retained
calls are captured in the ledger as ``pending`` entries tagged with the run id:
repeated planning in one run shares the budget, and a later user run starts
afresh.

Closing earlier runs' unanswered delegations on a new user turn belongs to
DurableContextMiddleware (20), which is always installed (spec 20).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime

from middlewares.model_response import append_visible_text
from middlewares.tool_call_args import clone_ai_message_with_tool_calls
from runtime.state import ThreadState
from subagents.contract import TASK_TOOL_NAME
from subagents.ledger import (
    Delegation,
    current_run_id,
    delegation_key,
    read_delegations,
    validate_delegation,
)
from subagents.limits import SubagentLimits

__all__ = ["SubagentLimitMiddleware", "limit_note"]

logger = logging.getLogger(__name__)


def limit_note(stripped: int, *, per_response: int, total: int, exhausted: bool) -> str:
    """The visible note appended when ``task`` calls are stripped."""
    calls = "call was" if stripped == 1 else "calls were"
    if exhausted:
        why = f"this run has used all {total} of its subagent delegations"
    else:
        why = f"at most {per_response} task calls run per response"
    return (
        f"[Subagent limit] {stripped} task {calls} not run: {why}. "
        "Continue with the results you already have and give your answer."
    )


def _run_id() -> str | None:
    try:
        return current_run_id(get_config())
    except RuntimeError:  # outside a runnable context (direct hook calls)
        return None


def _last_ai(messages: Sequence[BaseMessage]) -> AIMessage | None:
    if messages and isinstance(messages[-1], AIMessage):
        return messages[-1]
    return None


def _is_valid_task_call(call: Mapping[str, Any]) -> bool:
    args = call.get("args")
    if not isinstance(args, Mapping):
        return False
    return all(isinstance(args.get(k), str) for k in ("description", "prompt", "subagent_type"))


def _without_calls(message: AIMessage, drop_ids: set[str], note: str) -> AIMessage:
    """A copy of ``message`` without the dropped task calls, in every form a provider
    adapter may resend them (spec "Removing tool calls": structured, invalid, raw,
    ``function_call`` and content-block calls), with ``finish_reason="stop"`` and
    the visible note appended."""
    kept = [c for c in message.tool_calls if c.get("id") not in drop_ids]
    stripped = append_visible_text(clone_ai_message_with_tool_calls(message, kept), note)
    metadata = {**stripped.response_metadata, "finish_reason": "stop"}
    return stripped.model_copy(update={"response_metadata": metadata})


class SubagentLimitMiddleware(AgentMiddleware[ThreadState, Any]):
    """Per-response and per-run caps on ``task`` calls (spec 31)."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    state_schema = ThreadState

    def __init__(self, limits: SubagentLimits) -> None:
        super().__init__()
        self.limits = limits

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "max_per_response": self.limits.max_per_response,
            "max_total_per_run": self.limits.max_total_per_run,
            "max_concurrent": self.limits.max_concurrent,
        }

    # -- after_model: cap and capture ----------------------------------------------

    def _after(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        message = _last_ai(state.get("messages") or [])
        if message is None:
            return None
        task_calls = [c for c in message.tool_calls if c.get("name") == TASK_TOOL_NAME]
        if not task_calls:
            return None
        run_id = _run_id()
        entries = read_delegations(state)
        known = {delegation_key(e) for e in entries}
        used = sum(1 for e in entries if e["run_id"] == run_id)
        remaining = max(0, self.limits.max_total_per_run - used)
        allowed = min(self.limits.max_per_response, remaining)
        dropped: list[Mapping[str, Any]] = []
        new_entries: list[Delegation] = []
        admitted = 0
        now = datetime.now(UTC).isoformat(timespec="seconds")
        for call in task_calls:
            call_id = call.get("id")
            if isinstance(call_id, str) and (run_id, call_id) in known:
                continue  # captured before (a replayed response): never counted twice
            if admitted >= allowed:
                dropped.append(call)
                continue
            admitted += 1
            if isinstance(call_id, str) and _is_valid_task_call(call):
                args = call["args"]
                entry = validate_delegation(
                    {
                        "run_id": run_id,
                        "tool_call_id": call_id,
                        "status": "pending",
                        "subagent_type": args["subagent_type"],
                        "description": args["description"],
                        "updated_at": now,
                    }
                )
                if entry is not None:
                    new_entries.append(entry)
        update: dict[str, Any] = {}
        if dropped:
            drop_ids = {str(c.get("id")) for c in dropped}
            exhausted = remaining <= self.limits.max_per_response
            note = limit_note(
                len(dropped),
                per_response=self.limits.max_per_response,
                total=self.limits.max_total_per_run,
                exhausted=exhausted,
            )
            logger.info("subagent limit: stripped %d task call(s) (run %s)", len(dropped), run_id)
            update["messages"] = [_without_calls(message, drop_ids, note)]
        if new_entries:
            update["delegations"] = new_entries
        return update or None

    def after_model(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._after(state)

    async def aafter_model(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self._after(state)
