"""LoopDetectionMiddleware (spec 000, number 32): break repetitive tool-call loops.

Two brakes in one middleware. ``after_model`` counts this run's tool calls by a
hash of (name, canonical arguments) and by tool name. On the first crossing of
a warning threshold it queues a soft reminder, which ``wrap_model_call`` appends
to the *next* model request once the tool results are back (appending earlier
would split an AI tool call from its ToolMessage). On the hard limit it rewrites
the answer: every tool call is removed (structured, raw and content-block, via
``clone_ai_message_with_tool_calls``), a visible note is appended and the
message is stamped ``stop_reason: "loop_capped"`` (``consume_stop_reason``, shared
with TokenBudget), so the run ends with text.

Counts are per run and live in this instance (never in state): a new user run
starts from zero (``before_agent`` resets), and warnings never get checkpointed.
Transitions are published as ``middleware:loop_detection`` custom stream events
without arguments, content or argument-derived hashes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.runtime import Runtime

from middlewares._run_scope import current_run_key, emit_event, is_subagent_run
from middlewares._stop_reason import consume_stop_reason
from subagents.contract import StopReason

__all__ = ["LOOP_STOP_REASON", "LoopDetectionMiddleware", "tool_call_fingerprint"]

LOOP_STOP_REASON: StopReason = "loop_capped"
EVENT_TYPE = "middleware:loop_detection"

_WARNING = (
    "[Loop warning] You have called `{tool}` with the same arguments {count} times in this "
    "run. Repeating it will not give a different result. Use what you already have, try a "
    "different approach, or save your results and give your final answer."
)
_FREQUENCY_WARNING = (
    "[Loop warning] You have called `{tool}` {count} times in this run. Stop and check "
    "whether you are making progress; if not, save your results and answer."
)
_HARD_STOP = (
    "[Stopped: the agent repeated the same tool call too many times ({tool}, {count} calls), "
    "so its remaining tool calls were not run. This is the answer so far.]"
)


def tool_call_fingerprint(name: str, args: Any) -> str:
    """A stable hash of a call; malformed args hash by their repr, never raise."""
    try:
        canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), default=repr)
    except (TypeError, ValueError):
        canonical = repr(args)
    return hashlib.sha256(f"{name}\x00{canonical}".encode("utf-8", "replace")).hexdigest()


@dataclass
class _RunLoops:
    calls: Counter[str] = field(default_factory=Counter)
    tools: Counter[str] = field(default_factory=Counter)
    warned: set[str] = field(default_factory=set)
    pending: list[str] = field(default_factory=list)
    stopped: bool = False


def _is_hidden_context(message: Any) -> bool:
    """A request-only hidden message an outer wrapper appended (receipt ledger, reminders)."""
    if not isinstance(message, HumanMessage):
        return False
    kwargs = message.additional_kwargs or {}
    return kwargs.get("hide_from_ui") is True


def _tool_results_are_back(messages: list[Any]) -> bool:
    """The conversation ends with tool results, past any hidden context appended after them.

    Outer wrappers (ToolReceipt's ledger, spec 15) append hidden messages to the
    request before this middleware sees it, so the last message is not always
    the ``ToolMessage`` itself.
    """
    for message in reversed(messages):
        if _is_hidden_context(message):
            continue
        return isinstance(message, ToolMessage)
    return False


class LoopDetectionMiddleware(AgentMiddleware[Any, Any]):
    """Warn on, then hard-stop, repeated tool calls within one run."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        warn_threshold: int = 3,
        hard_limit: int = 5,
        tool_frequency_warn: int = 30,
        tool_frequency_hard: int = 50,
        max_tracked_runs: int = 512,
    ) -> None:
        super().__init__()
        if not 1 <= warn_threshold < hard_limit:
            raise ValueError("loop_detection: need 1 <= warn_threshold < hard_limit")
        if not 1 <= tool_frequency_warn < tool_frequency_hard:
            raise ValueError("loop_detection: need 1 <= tool_frequency_warn < tool_frequency_hard")
        self.warn_threshold = warn_threshold
        self.hard_limit = hard_limit
        self.tool_frequency_warn = tool_frequency_warn
        self.tool_frequency_hard = tool_frequency_hard
        self.max_tracked_runs = max(1, max_tracked_runs)
        self._runs: OrderedDict[tuple[str, str], _RunLoops] = OrderedDict()
        self._lock = threading.Lock()

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "warn_threshold": self.warn_threshold,
            "hard_limit": self.hard_limit,
            "tool_frequency_warn": self.tool_frequency_warn,
            "tool_frequency_hard": self.tool_frequency_hard,
        }

    # --- bookkeeping --------------------------------------------------------

    def _run(self, key: tuple[str, str]) -> _RunLoops:
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = _RunLoops()
                while len(self._runs) > self.max_tracked_runs:
                    self._runs.popitem(last=False)
            else:
                self._runs.move_to_end(key)
            return run

    def _reset(self) -> None:
        with self._lock:
            self._runs.pop(current_run_key(), None)

    # --- hooks ----------------------------------------------------------------

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._reset()
        return None

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._reset()
        return None

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._inspect(state)

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._inspect(state)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._with_reminders(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._with_reminders(request))

    # --- logic ----------------------------------------------------------------

    def _with_reminders(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        messages = list(request.messages)
        if not _tool_results_are_back(messages):
            return request
        run = self._run(current_run_key())
        with self._lock:
            pending, run.pending = run.pending, []
        if not pending:
            return request
        reminder = HumanMessage(
            content="\n\n".join(pending),
            additional_kwargs={"hide_from_ui": True, "deerflow_reminder": "loop_detection"},
        )
        return request.override(messages=[*messages, reminder])

    def _inspect(self, state: Any) -> dict[str, Any] | None:
        messages = state.get("messages") if isinstance(state, dict) else None
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        message: AIMessage = messages[-1]
        kwargs = message.additional_kwargs or {}
        if kwargs.get("model_length_termination") is True or not message.tool_calls:
            return None
        run = self._run(current_run_key())
        hard: tuple[str, int] | None = None
        with self._lock:
            if run.stopped:
                hard = (message.tool_calls[0].get("name") or "?", 0)
            for call in message.tool_calls:
                name = str(call.get("name") or "")
                fingerprint = tool_call_fingerprint(name, call.get("args"))
                run.calls[fingerprint] += 1
                run.tools[name] += 1
                same, total = run.calls[fingerprint], run.tools[name]
                if same >= self.hard_limit or total >= self.tool_frequency_hard:
                    hard = hard or (name, max(same, total))
                elif same >= self.warn_threshold and fingerprint not in run.warned:
                    run.warned.add(fingerprint)
                    run.pending.append(_WARNING.format(tool=name, count=same))
                    self._publish("warned", name, same, "repeated_call")
                elif total >= self.tool_frequency_warn and f"tool:{name}" not in run.warned:
                    run.warned.add(f"tool:{name}")
                    run.pending.append(_FREQUENCY_WARNING.format(tool=name, count=total))
                    self._publish("warned", name, total, "tool_frequency")
            if hard is not None:
                run.stopped = True
                run.pending.clear()
        if hard is None:
            return None
        name, count = hard
        self._publish("hard_stop", name, count, "hard_limit")
        note = _HARD_STOP.format(tool=name, count=count or "many")
        return {"messages": [consume_stop_reason(message, LOOP_STOP_REASON, note)]}

    def _publish(self, phase: str, tool: str, count: int, rule: str) -> None:
        emit_event(
            {
                "type": EVENT_TYPE,
                "phase": phase,
                "rule": rule,
                "tool": tool,
                "count": count,
                "is_subagent": is_subagent_run(),
            }
        )
