"""TodoListMiddleware (spec 000, number 22; plan mode): LangChain's todo list with DeerFlow's reminders.

LangChain's ``TodoListMiddleware`` provides ``write_todos``, the ``todos``
state key (visible to UIs in thread state) and the parallel-call check; it is
reused as is. DeerFlow adds what keeps a plan alive over a long run:

- **Window reminder**: when ``todos`` still hold open items but no
  ``write_todos`` call is left in the request (summarization or trimming
  removed it), the request gets a hidden reminder listing them (request view
  only, never stored).
- **Completion jump-back**: when the model wraps up (no tool calls) while
  todos are open, ``after_model`` jumps back to the model once per run
  (``completion_reminders``) and the next request carries a hidden reminder.
- **No reminder after a length termination** (``model_length_termination``):
  a capped turn ends cleanly.
- **Requeue on a raising model call**: a reminder taken by a call that raises
  is put back, uncounted, for the retry.

Per-run bookkeeping lives on the instance keyed by (thread, run) and is
cleared in ``before_agent``; statuses that are not strings are skipped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from langchain.agents.middleware import TodoListMiddleware as LangChainTodoList
from langchain.agents.middleware import hook_config
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from middlewares._run_scope import current_run_key

__all__ = ["TodoListMiddleware", "open_todos"]

_LENGTH_KEY = "model_length_termination"
_MAX_RUNS = 1024


def open_todos(todos: Any) -> list[str]:
    """Texts of the todos that are not completed (malformed items are skipped)."""
    items: list[str] = []
    for todo in todos if isinstance(todos, list) else ():
        if not isinstance(todo, Mapping):
            continue
        status, content = todo.get("status"), todo.get("content")
        if not isinstance(status, str) or not isinstance(content, str):
            continue
        if status != "completed":
            items.append(f"- [{status}] {content}")
    return items


def _reminder(kind: str, items: list[str]) -> HumanMessage:
    if kind == "completion":
        head = (
            "You were about to finish, but your todo list still has unfinished items. "
            "Continue working on them, or update the list with write_todos (mark items "
            "completed, or remove those that no longer apply) before you give your final answer."
        )
    else:
        head = (
            "Your todo list is still active (its write_todos call is no longer in view). "
            "Keep it up to date with write_todos as you work."
        )
    return HumanMessage(
        content="<system-reminder>\n" + head + "\n" + "\n".join(items) + "\n</system-reminder>",
        additional_kwargs={"hide_from_ui": True, "deerflow_reminder": f"todo_{kind}"},
    )


class TodoListMiddleware(LangChainTodoList):  # type: ignore[type-arg]
    """Plan mode's todo list, with window and completion reminders."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    def __init__(self, *, completion_reminders: int = 1, window_reminder: bool = True) -> None:
        super().__init__()
        if completion_reminders < 0:
            raise ValueError("todo: completion_reminders must be >= 0")
        self.completion_reminders = completion_reminders
        self.window_reminder = window_reminder
        self._queued: OrderedDict[tuple[str, str], list[str]] = OrderedDict()
        self._jumps: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()
        self._system: tuple[SystemMessage | None, SystemMessage] | None = None

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "completion_reminders": self.completion_reminders,
            "window_reminder": self.window_reminder,
        }

    # -- per-run bookkeeping -----------------------------------------------------

    def _reset(self) -> None:
        key = current_run_key()
        with self._lock:
            self._queued.pop(key, None)
            self._jumps.pop(key, None)

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._reset()
        return None

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._reset()
        return None

    # -- after_model: the completion jump-back ----------------------------------------

    def _completion(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        messages: Sequence[BaseMessage] = state.get("messages") or []
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        last = messages[-1]
        if last.tool_calls or (last.additional_kwargs or {}).get(_LENGTH_KEY) is True:
            return None
        if (last.additional_kwargs or {}).get("stop_reason"):
            return None  # a guard ended the run on purpose
        items = open_todos(state.get("todos"))
        if not items:
            return None
        key = current_run_key()
        with self._lock:
            used = self._jumps.get(key, 0)
            if used >= self.completion_reminders:
                return None
            self._jumps[key] = used + 1
            self._queued[key] = items
            self._jumps.move_to_end(key)
            while len(self._jumps) > _MAX_RUNS:
                self._jumps.popitem(last=False)
            while len(self._queued) > _MAX_RUNS:
                self._queued.popitem(last=False)
        return {"jump_to": "model"}

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return super().after_model(state, runtime) or self._completion(state)

    @hook_config(can_jump_to=["model"])
    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return await super().aafter_model(state, runtime) or self._completion(state)

    # -- wrap_model_call: reminders in the request view --------------------------------

    def _take(self, request: ModelRequest[Any]) -> tuple[ModelRequest[Any], list[str] | None]:
        key = current_run_key()
        with self._lock:
            queued = self._queued.pop(key, None)
        if queued:
            reminder = _reminder("completion", queued)
            return request.override(messages=[*request.messages, reminder]), queued
        if not self.window_reminder:
            return request, None
        state = request.state if isinstance(request.state, Mapping) else {}
        items = open_todos(state.get("todos"))
        if not items:
            return request, None
        in_view = any(
            isinstance(m, AIMessage) and any(c.get("name") == "write_todos" for c in m.tool_calls)
            for m in request.messages
        )
        if in_view:
            return request, None
        return request.override(messages=[*request.messages, _reminder("window", items)]), None

    def _with_system_prompt(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request with the todo system prompt appended, as LangChain's class does it.

        Built once per distinct system message (it is the same object on every
        step of a run), not on every model call: ``content_blocks`` re-parses it.
        """
        base = request.system_message
        cached = self._system
        if cached is None or cached[0] is not base:
            blocks: list[str | dict[str, str]] = [
                *(cast("list[dict[str, str]]", base.content_blocks) if base is not None else []),
                {
                    "type": "text",
                    "text": f"\n\n{self.system_prompt}" if base is not None else self.system_prompt,
                },
            ]
            cached = self._system = (base, SystemMessage(content=blocks))
        return request.override(system_message=cached[1])

    def _requeue(self, queued: list[str] | None) -> None:
        if queued:
            with self._lock:
                self._queued[current_run_key()] = queued

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage:
        request, queued = self._take(request)
        try:
            return handler(self._with_system_prompt(request))
        except Exception:
            self._requeue(queued)
            raise

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        request, queued = self._take(request)
        try:
            return await handler(self._with_system_prompt(request))
        except Exception:
            self._requeue(queued)
            raise
