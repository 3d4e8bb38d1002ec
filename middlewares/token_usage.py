"""TokenUsageMiddleware (spec 000, number 23): what each run spent, per model, subagents included.

Why: operators and UIs need a run's cost, and TokenBudget (33) needs the same
numbers. After each model call the answer's ``usage_metadata`` (input, output,
total, cache read/creation where the provider reports them) is added to the
run's running total, which rides the answer itself
(``response_metadata["run_token_usage"]``: the model node writes ``messages``
on every step anyway, so this costs no extra channel write, and an answer that
already carries the stamp is never counted again). In the same hook, terminal
``task`` results of subagents are attributed to their dispatching message
exactly once (``attribute_subagent_usage``) and added to the run's ``subagent``
totals. At run end the total is written to ``ThreadState.token_usage`` (keyed
by run id) and published as a ``token_usage`` custom stream event.

Where the stamp is written: ``wrap_model_call`` stamps the answer on its way
out of the model call, so the model node writes it once. Stamping it in
``after_model`` instead rewrote every answer in the same step (a second
``messages`` write, reduced and checkpointed again: the largest per-step cost
of this middleware). ``after_model`` still stamps any answer that reaches state
without one (an outer layer replaced it), and does the subagent attribution,
which needs the state the guards leave (the spec's ordering).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime

from middlewares._run_scope import emit_event, is_subagent_run
from middlewares._usage import (
    add_usage,
    attribute_subagent_usage,
    latest_run_stamp,
    message_usage,
)
from middlewares.model_response import last_ai_message, replace_last_ai_message
from runtime.state import ThreadState
from subagents.ledger import current_run_id

__all__ = [
    "EVENT_TYPE",
    "RUN_USAGE_KEY",
    "TokenUsageMiddleware",
    "attribute_update",
    "current_run_usage",
    "run_id_or_default",
]

EVENT_TYPE = "token_usage"
RUN_USAGE_KEY = "run_token_usage"


def run_id_or_default() -> str:
    try:
        return current_run_id(get_config()) or "-"
    except RuntimeError:
        return "-"


def _stamp(message: AIMessage, entry: Mapping[str, Any]) -> AIMessage:
    metadata = {**(message.response_metadata or {}), RUN_USAGE_KEY: dict(entry)}
    return message.model_copy(update={"response_metadata": metadata})


def _added(entry: dict[str, Any], message: AIMessage) -> dict[str, Any]:
    """``entry`` (the run's total before ``message``) with ``message``'s own usage counted."""
    usage = message_usage(message)
    entry.update(add_usage({k: entry.get(k, 0) for k in usage}, usage))
    model = str((message.response_metadata or {}).get("model_name") or "unknown")[:128]
    models = dict(entry.get("models") or {})
    models[model] = add_usage(models.get(model), usage)
    entry["models"] = models
    entry["calls"] = int(entry.get("calls", 0)) + 1
    entry["counted"] = message.id
    return entry


def current_run_usage(messages: Sequence[BaseMessage], run_id: str) -> dict[str, Any]:
    """The run's total so far (from the newest stamped answer), or a fresh one."""
    last = messages[-1] if messages else None
    if isinstance(last, AIMessage):
        stamp = (last.response_metadata or {}).get(RUN_USAGE_KEY)
        if isinstance(stamp, Mapping) and stamp.get("run_id") == run_id:
            return dict(stamp)
    found = latest_run_stamp(messages, RUN_USAGE_KEY, run_id, before=len(messages))
    return found or {"run_id": run_id}


def attribute_update(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The update attributing terminal subagent usage once; the run total on the
    newest answer gains it (its ``subagent`` and ``total_tokens``)."""
    messages: Sequence[BaseMessage] = state.get("messages") or []
    updates, added = attribute_subagent_usage(messages)
    if not updates:
        return None
    last = messages[-1] if messages else None
    if isinstance(last, AIMessage) and last.id:
        run_id = run_id_or_default()
        entry = current_run_usage(messages, run_id)
        entry["subagent"] = add_usage(entry.get("subagent"), added)
        entry["total_tokens"] = entry.get("total_tokens", 0) + added.get("total_tokens", 0)
        entry.setdefault("counted", None)
        replaced = next((u for u in updates if u.id == last.id), last)
        updates = [u for u in updates if u.id != last.id]
        updates.append(_stamp(replaced, entry))  # type: ignore[arg-type]
    return {"messages": updates}


class TokenUsageMiddleware(AgentMiddleware[ThreadState, Any]):
    """Record per-run token usage on each answer, in state at run end and as an event."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    state_schema = ThreadState

    def __init__(self, *, emit_events: bool = True) -> None:
        super().__init__()
        self.emit_events = emit_events

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"emit_events": self.emit_events, "carrier": "response_metadata.run_token_usage"}

    def _record(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        attributed = attribute_update(state)
        messages: list[BaseMessage] = list(state.get("messages") or [])
        if attributed is not None:
            by_id = {m.id: m for m in attributed["messages"]}
            messages = [by_id.get(m.id, m) for m in messages]
        if not messages or not isinstance(messages[-1], AIMessage):
            return attributed
        message: AIMessage = messages[-1]
        run_id = run_id_or_default()
        entry = current_run_usage(messages, run_id)
        if entry.get("counted") == message.id and message.id is not None:
            return attributed  # counted before (replay or re-entry)
        updates = [m for m in (attributed or {}).get("messages", []) if m.id != message.id]
        return {"messages": [*updates, _stamp(message, _added(entry, message))]}

    def _finish(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        run_id = run_id_or_default()
        messages: Sequence[BaseMessage] = state.get("messages") or []
        entry = current_run_usage(messages, run_id)
        if "calls" not in entry:
            return None
        public = {k: v for k, v in entry.items() if k not in ("counted", "run_id")}
        if self.emit_events:
            emit_event(
                {
                    "type": EVENT_TYPE,
                    "run_id": run_id,
                    "usage": public,
                    "is_subagent": is_subagent_run(),
                }
            )
        return {"token_usage": {run_id: public}}

    def _stamped_response(self, request: ModelRequest[Any], response: Any) -> Any:
        """The response with its answer stamped (the running total from the state before it)."""
        message = last_ai_message(response)
        if message is None:
            return response
        if message.id is None:
            # counted by id: the answer needs one now (add_messages would assign one anyway)
            message = message.model_copy(update={"id": f"lc_run--{uuid.uuid4()}"})
        state = request.state if isinstance(request.state, Mapping) else {}
        messages: Sequence[BaseMessage] = state.get("messages") or []
        entry = current_run_usage(messages, run_id_or_default())
        return replace_last_ai_message(response, _stamp(message, _added(entry, message)))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return self._stamped_response(request, handler(request))  # type: ignore[no-any-return]

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return self._stamped_response(request, await handler(request))  # type: ignore[no-any-return]

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
