"""TokenUsageMiddleware (spec 000, number 23): what each run spent, per model, subagents included.

Why: operators and UIs need a run's cost, and TokenBudget (33) needs the same
numbers. After each model call the answer's ``usage_metadata`` (input, output,
total, cache read/creation where the provider reports them) is added to the
run's entry in ``ThreadState.token_usage`` (keyed by run id, per model too);
the answer is counted once (its id is remembered). Before each model call,
terminal ``task`` results of subagents are attributed to their dispatching
message exactly once (``attribute_subagent_usage``) and added to the run's
``subagent`` totals. At run end the usage is published as a ``token_usage``
custom stream event and stamped on the run's final answer
(``response_metadata["run_token_usage"]``), next to the run's metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime

from middlewares._run_scope import emit_event, is_subagent_run
from middlewares._usage import add_usage, attribute_subagent_usage, message_usage
from runtime.state import ThreadState
from subagents.ledger import current_run_id

__all__ = [
    "EVENT_TYPE",
    "RUN_USAGE_KEY",
    "TokenUsageMiddleware",
    "attribute_update",
    "run_id_or_default",
]

EVENT_TYPE = "token_usage"
RUN_USAGE_KEY = "run_token_usage"


def run_id_or_default() -> str:
    try:
        return current_run_id(get_config()) or "-"
    except RuntimeError:
        return "-"


def _entry(state: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    usage = state.get("token_usage")
    entry = usage.get(run_id) if isinstance(usage, Mapping) else None
    return dict(entry) if isinstance(entry, Mapping) else {}


def attribute_update(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The state update attributing terminal subagent usage once (messages + run totals)."""
    updates, added = attribute_subagent_usage(state.get("messages") or [])
    if not updates:
        return None
    run_id = run_id_or_default()
    entry = _entry(state, run_id)
    entry["subagent"] = add_usage(entry.get("subagent"), added)
    entry["total_tokens"] = entry.get("total_tokens", 0) + added.get("total_tokens", 0)
    return {"messages": updates, "token_usage": {run_id: entry}}


class TokenUsageMiddleware(AgentMiddleware[ThreadState, Any]):
    """Record per-run token usage in state, on the final answer and as an event."""

    state_schema = ThreadState

    def __init__(self, *, emit_events: bool = True) -> None:
        super().__init__()
        self.emit_events = emit_events

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"emit_events": self.emit_events}

    def _attribute(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        return attribute_update(state)

    def _record(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        messages = state.get("messages") or []
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        message: AIMessage = messages[-1]
        run_id = run_id_or_default()
        entry = _entry(state, run_id)
        if message.id and entry.get("last_message_id") == message.id:
            return None  # counted before (replay or re-entry)
        usage = message_usage(message)
        entry.update(add_usage({k: entry.get(k, 0) for k in usage}, usage))
        model = str((message.response_metadata or {}).get("model_name") or "unknown")[:128]
        models = dict(entry.get("models") or {})
        models[model] = add_usage(models.get(model), usage)
        entry["models"] = models
        entry["calls"] = int(entry.get("calls", 0)) + 1
        entry["last_message_id"] = message.id
        return {"token_usage": {run_id: entry}}

    def _finish(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        run_id = run_id_or_default()
        entry = _entry(state, run_id)
        if not entry:
            return None
        public = {k: v for k, v in entry.items() if k != "last_message_id"}
        if self.emit_events:
            emit_event(
                {
                    "type": EVENT_TYPE,
                    "run_id": run_id,
                    "usage": public,
                    "is_subagent": is_subagent_run(),
                }
            )
        messages = state.get("messages") or []
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage) or not last.id:
            return None
        if (last.response_metadata or {}).get(RUN_USAGE_KEY) == public:
            return None
        stamped = last.model_copy(
            update={"response_metadata": {**(last.response_metadata or {}), RUN_USAGE_KEY: public}}
        )
        return {"messages": [stamped]}

    def before_model(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._attribute(state)

    async def abefore_model(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self._attribute(state)

    def after_model(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._record(state)

    async def aafter_model(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self._record(state)

    def after_agent(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._finish(state)

    async def aafter_agent(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self._finish(state)
