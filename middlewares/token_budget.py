"""TokenBudgetMiddleware (spec 000, number 33): stop a run that spends more than its budget.

Why: a tool loop can burn tokens without end. The run's spend rides its newest
answer (``response_metadata["token_budget"]``: ``{run_id, spent, children}``;
the model node writes ``messages`` on every step anyway, so this costs no extra
channel write, and summarization always keeps the newest answer). It is keyed
by run id, so it survives continuations of the same run and a new user run
starts with a fresh budget; the look-back stops at the latest user turn, so an
invocation without a run id starts afresh too. After each model call the
answer's usage is added (once: an answer carrying the stamp is not counted
again), plus the usage of subagents attributed since (terminal ``task``
results marked ``subagent_token_usage_attributed``). With TokenUsage on
(``usage_tracked``), the spend is read from its running total on the answers
instead, so the guard adds no write of its own until it caps. When the spend reaches
``max_tokens_per_run`` the answer becomes final through the shared
``consume_stop_reason``: its tool calls are removed, a visible note is added and
``stop_reason: "token_capped"`` is stamped (subagents report it in their
result). A ``middleware:token_budget`` custom event says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.runtime import Runtime

from middlewares._run_scope import emit_event, is_subagent_run
from middlewares._stop_reason import consume_stop_reason
from middlewares._usage import ATTRIBUTED_KEY, latest_run_stamp, message_usage
from middlewares.token_usage import current_run_usage, run_id_or_default
from runtime.state import ThreadState
from subagents.contract import StopReason, read_task_result_metadata

__all__ = ["BUDGET_KEY", "EVENT_TYPE", "TOKEN_STOP_REASON", "TokenBudgetMiddleware", "budget_note"]

TOKEN_STOP_REASON: StopReason = "token_capped"
BUDGET_KEY = "token_budget"
EVENT_TYPE = "middleware:token_budget"


def budget_note(spent: int, limit: int) -> str:
    return (
        f"[Stopped: this run used {spent} tokens, reaching its budget of {limit}, so its "
        "remaining tool calls were not run. This is the answer so far; send a new message "
        "to continue with a fresh budget.]"
    )


class TokenBudgetMiddleware(AgentMiddleware[ThreadState, Any]):
    """End a run with a visible note once it has spent ``max_tokens_per_run`` tokens."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    state_schema = ThreadState

    def __init__(self, *, max_tokens_per_run: int, usage_tracked: bool = False) -> None:
        super().__init__()
        if not isinstance(max_tokens_per_run, int) or max_tokens_per_run < 1:
            raise ValueError("token_budget: max_tokens_per_run must be a positive integer")
        self.max_tokens_per_run = max_tokens_per_run
        self.usage_tracked = usage_tracked

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"max_tokens_per_run": self.max_tokens_per_run, "usage_tracked": self.usage_tracked}

    def _spent_from_usage(self, messages: Sequence[BaseMessage], message: AIMessage) -> int:
        """The run's spend from TokenUsage's running total (children attributed ahead of
        this guard by CompletedSubagentUsage included) plus this answer if not yet in it."""
        total = current_run_usage(messages, run_id_or_default())
        spent = total.get("total_tokens", 0)
        spent = spent if isinstance(spent, int) and spent >= 0 else 0
        if total.get("counted") != message.id or message.id is None:
            spent += message_usage(message)["total_tokens"]
        return spent

    def _check(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        messages = state.get("messages") or []
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        message: AIMessage = messages[-1]
        if self.usage_tracked:
            # TokenUsage carries the run's total on each answer: no second stamp.
            spent = self._spent_from_usage(messages, message)
            if spent < self.max_tokens_per_run:
                return None
            return {"messages": [self._cap(message, spent)]}
        run_id = run_id_or_default()
        own = (message.response_metadata or {}).get(BUDGET_KEY)
        if isinstance(own, Mapping) and own.get("run_id") == run_id:
            # Re-entry: this answer was counted; only new child usage may be added.
            budget: dict[str, Any] = {**own, "children": list(own.get("children") or [])}
        else:
            budget = latest_run_stamp(messages, BUDGET_KEY, run_id, before=len(messages) - 1) or {}
            raw_spent = budget.get("spent")
            spent = raw_spent if isinstance(raw_spent, int) and raw_spent >= 0 else 0
            budget = {
                "run_id": run_id,
                "spent": spent + message_usage(message)["total_tokens"],
                "children": [c for c in budget.get("children") or [] if isinstance(c, str)],
            }
        children: list[str] = budget["children"]
        for item in messages:
            kwargs = item.additional_kwargs or {}
            if not isinstance(item, ToolMessage) or kwargs.get(ATTRIBUTED_KEY) is not True:
                continue
            if item.tool_call_id in children:
                continue
            meta = read_task_result_metadata(kwargs)
            if meta is not None and "token_usage" in meta:
                budget["spent"] += meta["token_usage"]["total_tokens"]
                children.append(item.tool_call_id)
        if own == budget:
            return None
        spent = budget["spent"]
        stamped = message.model_copy(
            update={"response_metadata": {**(message.response_metadata or {}), BUDGET_KEY: budget}}
        )
        if spent >= self.max_tokens_per_run:
            stamped = self._cap(stamped, spent)
        return {"messages": [stamped]}

    def _cap(self, message: AIMessage, spent: int) -> AIMessage:
        emit_event(
            {
                "type": EVENT_TYPE,
                "phase": "capped",
                "spent": spent,
                "limit": self.max_tokens_per_run,
                "is_subagent": is_subagent_run(),
            }
        )
        return consume_stop_reason(
            message, TOKEN_STOP_REASON, budget_note(spent, self.max_tokens_per_run)
        )

    def after_model(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._check(state)

    async def aafter_model(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self._check(state)
