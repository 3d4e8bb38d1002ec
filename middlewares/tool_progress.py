"""ToolProgressMiddleware (spec 14): keep a run from grinding on a failing tool.

It sits just outside ToolErrorHandlingMiddleware, so every result it sees is
stamped with ``deerflow_tool_meta``, and reads only that stamp (and the gate's
``AuthorizationOutcome``), never arguments or content. Per run, a small state
machine per tool:

- **recoverable** problems (the model can fix its call: invalid arguments, a
  wrong path, a missing read) put the tool in ``warned`` and append a hint;
  it stays usable;
- **retryable** problems (timeouts, transient and generic tool errors) warn
  too, and ``retryable_failures_to_block`` of them in a row *block* the tool;
- **stop** problems (a denied or blocked call, an internal error, an
  unsupported operation) block that exact call at once: it is not run again
  in this run.

A blocked call is answered without running (an error ``ToolMessage`` with
``deerflow_tool_meta``, ``source: tool_progress``). A success returns a warned
tool to ``ok``. Each effective phase change emits ``middleware:tool_progress``
with the tool, the phase, the action and count (the count only for retryable
escalation), and the hook; a new invocation on the same thread clears warned
and blocked state and says so with a ``reset`` event. Recording never fails a
call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from authz.outcome import pop_outcome
from middlewares._run_scope import current_run_key, emit_event
from middlewares._tool_meta import blocked_tool_message
from middlewares.tool_result_meta import read_tool_meta

__all__ = ["RECOVERABLE", "RETRYABLE", "STOP", "TOOL_PROGRESS_EVENT", "ToolProgressMiddleware"]

logger = logging.getLogger(__name__)

TOOL_PROGRESS_EVENT = "middleware:tool_progress"
RECOVERABLE = frozenset(
    {"invalid_arguments", "unknown_tool", "not_found", "invalid_path", "read_required"}
)
RETRYABLE = frozenset({"timeout", "transient", "tool_error"})
STOP = frozenset({"blocked", "permission_denied", "internal_error", "unsupported"})
_MAX_THREADS = 1024
ToolResult = ToolMessage | Command[Any]


@dataclass
class _Progress:
    run_id: str
    phase: dict[str, str] = field(default_factory=dict)  # tool -> ok | warned | blocked
    retryable: dict[str, int] = field(default_factory=dict)
    blocked_calls: set[str] = field(default_factory=set)  # hashes of (tool, args)


def _call_hash(name: str, args: Any) -> str:
    try:
        text = json.dumps(args, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(args)
    return hashlib.sha256(f"{name}\0{text}".encode()).hexdigest()[:24]


def _result_message(result: ToolResult, call_id: str) -> ToolMessage | None:
    if isinstance(result, ToolMessage):
        return result
    if isinstance(result, Command) and isinstance(result.update, dict):
        for message in result.update.get("messages") or ():
            if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
                return message
    return None


def _with_hint(result: ToolResult, call_id: str, hint: str) -> ToolResult:
    def patch(message: ToolMessage) -> ToolMessage:
        if isinstance(message.content, str):
            return message.model_copy(update={"content": f"{message.content}\n\n{hint}"})
        return message.model_copy(
            update={"content": [*message.content, {"type": "text", "text": hint}]}
        )

    if isinstance(result, ToolMessage):
        return patch(result)
    if isinstance(result, Command) and isinstance(result.update, dict):
        messages = [
            patch(m) if isinstance(m, ToolMessage) and m.tool_call_id == call_id else m
            for m in result.update.get("messages") or ()
        ]
        return Command(
            graph=result.graph,
            update={**result.update, "messages": messages},
            resume=result.resume,
            goto=result.goto,
        )
    return result


class ToolProgressMiddleware(AgentMiddleware[Any, Any]):
    """Warn on failing tools, then block them, per run.

    Args:
        retryable_failures_to_block: consecutive retryable failures of one tool
            that move it from ``warned`` to ``blocked``.
    """

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(self, *, retryable_failures_to_block: int = 3) -> None:
        super().__init__()
        if retryable_failures_to_block < 1:
            raise ValueError("retryable_failures_to_block must be at least 1")
        self.retryable_failures_to_block = retryable_failures_to_block
        self._lock = threading.Lock()
        self._threads: OrderedDict[str, _Progress] = OrderedDict()

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"retryable_failures_to_block": self.retryable_failures_to_block}

    # --- state -------------------------------------------------------------

    def _progress(self, hook: str, *, fresh: bool = False) -> _Progress:
        """This run's progress. ``fresh`` (a new invocation) or a new run id starts over,
        and a reset of warned or blocked state is reported."""
        thread_id, run_id = current_run_key()
        reset = False
        with self._lock:
            progress = self._threads.get(thread_id)
            if fresh or progress is None or progress.run_id != run_id:
                reset = progress is not None and (
                    bool(progress.blocked_calls)
                    or any(phase != "ok" for phase in progress.phase.values())
                )
                progress = _Progress(run_id=run_id)
                self._threads[thread_id] = progress
                while len(self._threads) > _MAX_THREADS:
                    self._threads.popitem(last=False)
            else:
                self._threads.move_to_end(thread_id)
        if reset:
            self._emit({"tool": None, "phase": "reset", "action": "reset", "count": None}, hook)
        return progress

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._progress("before_agent", fresh=True)
        return None

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._progress("abefore_agent", fresh=True)
        return None

    @staticmethod
    def _emit(event: dict[str, Any], hook: str) -> None:
        try:
            emit_event({"type": TOOL_PROGRESS_EVENT, **event, "hook": hook})
        except Exception:  # recording is fail-open
            logger.debug("tool progress event dropped", exc_info=True)

    # --- decisions ---------------------------------------------------------

    def _blocked(self, progress: _Progress, name: str, args: Any) -> bool:
        with self._lock:
            if progress.phase.get(name) == "blocked":
                return True
            if not progress.blocked_calls:
                return False
        return _call_hash(name, args) in progress.blocked_calls

    def _observe(
        self,
        progress: _Progress,
        request: ToolCallRequest,
        result: ToolResult,
        name: str,
        hook: str,
    ) -> ToolResult:
        call_id = str(request.tool_call.get("id") or "")
        outcome = pop_outcome(request.runtime, current_run_key(), call_id)
        message = _result_message(result, call_id)
        meta = read_tool_meta(message) if message is not None else None
        if outcome is not None and not outcome.allowed:
            error_type: str | None = "permission_denied"
        elif meta is None or meta.get("status") != "error":
            error_type = None
        else:
            error_type = str(meta.get("error_type") or "tool_error")
        event: dict[str, Any] | None = None
        hint: str | None = None
        with self._lock:
            before = progress.phase.get(name, "ok")
            if error_type is None:
                progress.retryable.pop(name, None)
                if before == "warned":
                    progress.phase[name] = "ok"
                    event = {"phase": "ok", "action": "recovered", "count": None}
            elif error_type in STOP:
                progress.blocked_calls.add(_call_hash(name, request.tool_call.get("args")))
                event = {"phase": "blocked", "action": "block_call", "count": None}
                hint = "This exact call will not be run again in this run."
            else:
                count = progress.retryable.get(name, 0)
                if error_type in RETRYABLE:
                    count += 1
                    progress.retryable[name] = count
                if error_type in RETRYABLE and count >= self.retryable_failures_to_block:
                    progress.phase[name] = "blocked"
                    event = {"phase": "blocked", "action": "block_tool", "count": count}
                    hint = (
                        f"{name} failed {count} times in a row; it is blocked for the rest of "
                        "this run. Continue without it or tell the user."
                    )
                else:
                    progress.phase[name] = "warned"
                    if before != "warned":
                        event = {
                            "phase": "warned",
                            "action": "warn",
                            "count": count if error_type in RETRYABLE else None,
                        }
                    action = (meta or {}).get("recommended_next_action")
                    hint = f"Hint: {action}" if isinstance(action, str) and action else None
        if event is not None:
            self._emit(
                {
                    "tool": name,
                    **event,
                    "status": "error" if error_type else "success",
                    "error_type": error_type,
                },
                hook,
            )
        return _with_hint(result, call_id, hint) if hint else result

    def _refused(self, request: ToolCallRequest, name: str) -> ToolMessage:
        return blocked_tool_message(
            content=(
                f"Error: {name} is blocked for the rest of this run after repeated failures "
                "(or this exact call already failed in a way that cannot succeed). It was not "
                "run. Continue without it, or tell the user what is failing."
            ),
            tool_call_id=str(request.tool_call.get("id") or ""),
            name=name,
            error_type="blocked",
            source="tool_progress",
        )

    # --- hooks -------------------------------------------------------------

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        name = str(request.tool_call.get("name") or "")
        progress = self._progress("wrap_tool_call")
        if self._blocked(progress, name, request.tool_call.get("args")):
            return self._refused(request, name)
        result = handler(request)
        return self._observe(progress, request, result, name, "wrap_tool_call")

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        name = str(request.tool_call.get("name") or "")
        progress = self._progress("awrap_tool_call")
        if self._blocked(progress, name, request.tool_call.get("args")):
            return self._refused(request, name)
        result = await handler(request)
        return self._observe(progress, request, result, name, "awrap_tool_call")
