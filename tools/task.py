"""The ``task`` tool: the lead agent delegates a bounded task to a subagent.

Built per lead-agent build (``make_task_tool``), so its description lists the
subagent types this deployment offers, and its concurrency bound is per run:
several ``task`` calls in one AI message run concurrently, at most
``max_concurrent_subagents`` at a time, the rest waiting (``pending``).

Progress is emitted as custom stream events (``stream_mode="custom"``):
``task_started`` (pending), ``task_running`` (a slot was acquired, then each
subagent step), and one of ``task_completed`` / ``task_failed`` /
``task_timed_out`` / ``task_cancelled``, all carrying ``task_id`` (the tool
call id). The tool returns a ``Command`` whose ``ToolMessage`` and ledger
entry come from the same ``TaskOutcome``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import uuid
from typing import Annotated, Any

from langchain.tools import ToolRuntime
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.types import Command
from pydantic import Field

from runtime.config import Settings
from runtime.run_options import resolve_run_options
from runtime.skills import run_skill_allowlist
from subagents.contract import TASK_TOOL_NAME
from subagents.executor import (
    ParentContext,
    SubagentBuilder,
    SubagentRunner,
    TaskSpec,
    TaskTrack,
    execute_task,
    make_runner,
)
from subagents.ledger import current_run_id
from subagents.limits import SubagentLimits
from subagents.results import TaskOutcome
from subagents.types import (
    SubagentType,
    available_subagent_types,
    resolve_subagent_model,
)
from tools.selection import TOOL_CATALOG, capability_gate

__all__ = ["TOOL_CATALOG", "make_task_tool", "task_tool_description"]


def _sorted_or_none(names: frozenset[str] | None) -> tuple[str, ...] | None:
    return None if names is None else tuple(sorted(names))


logger = logging.getLogger(__name__)

_DESCRIPTION_HEAD = """\
Delegate a bounded, self-contained task to a subagent that works in its own
context and returns a concise result. Use it for independent pieces of work that
can run in parallel (issue several task calls in one message) or that would
otherwise flood your context. Do not use it for trivial steps, for steps that
depend on each other, or for anything that needs the user's input. The subagent
cannot see this conversation: put everything it needs into `prompt`.

Available subagent types:
"""


def task_tool_description(types: list[SubagentType]) -> str:
    lines = [f"- {t.name}: {' '.join(t.description.split())}" for t in types]
    return _DESCRIPTION_HEAD + "\n".join(lines)


_LABEL_LIMIT = 200


class _RunSlots:
    """The per-run concurrency bound, created on first use inside the run's loop."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._semaphore: asyncio.Semaphore | None = None

    def get(self) -> asyncio.Semaphore:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.size)
        return self._semaphore


def _safe_emit(runtime: ToolRuntime[Any, Any]) -> Any:
    """An emitter usable from the isolated child context too.

    LangGraph's stream writer reads the current runnable config when called, so
    events are written inside a copy of the tool's own context.
    """
    writer = getattr(runtime, "stream_writer", None)
    parent_context = contextvars.copy_context()

    def emit(event: dict[str, Any]) -> None:
        if writer is None:
            return
        try:
            parent_context.run(writer, event)
        except Exception:  # a closed stream must not fail the task
            logger.debug("could not emit %s", event.get("type"), exc_info=True)

    return emit


def make_task_tool(
    settings: Settings,
    *,
    limits: SubagentLimits,
    parent_model: str | None,
    runner: SubagentRunner | None = None,
    build_subagent: SubagentBuilder | None = None,
) -> BaseTool:
    """The ``task`` tool for one lead-agent build.

    ``build_subagent`` (from the composition root) builds each in-process
    subagent's graph; ``runner`` replaces the configured runner outright.
    """
    # A type's tools pass the same gates as in its build (the model is not known here).
    gate = capability_gate(settings, kind="subagent", model=None)
    offered = available_subagent_types(settings, TOOL_CATALOG, include=gate)
    by_name = {t.name: t for t in offered}
    executor = runner or make_runner(settings, build_subagent)
    slots = _RunSlots(limits.max_concurrent)
    defaults = settings.subagents

    async def task(
        description: Annotated[
            str, Field(description="A short (3-7 words) label for the task, shown to the user.")
        ],
        prompt: Annotated[
            str,
            Field(
                description="Everything the subagent needs: the goal, the context, "
                "constraints and the form of the result."
            ),
        ],
        subagent_type: Annotated[
            str, Field(description="One of the available subagent types listed above.")
        ],
        runtime: ToolRuntime[Any, Any],
    ) -> Command[Any]:
        task_id = runtime.tool_call_id or f"task-{uuid.uuid4().hex[:12]}"
        # Model-written labels: bounded before they reach events, state and logs.
        description = " ".join(description.split())[:_LABEL_LIMIT]
        subagent_type = subagent_type.strip()[:_LABEL_LIMIT]
        emit = _safe_emit(runtime)
        parent = ParentContext.from_run(runtime.config, runtime.state)
        parent = dataclasses.replace(
            parent,
            skill_allowlist=_sorted_or_none(
                run_skill_allowlist(settings, resolve_run_options(runtime.config), subagent=False)
            ),
        )
        run_id = current_run_id(runtime.config)
        chosen = by_name.get(subagent_type)
        emit(
            {
                "type": "task_started",
                "task_id": task_id,
                "status": "pending",
                "description": description,
                "subagent_type": subagent_type,
                "execution": executor.execution,
            }
        )

        def finish(outcome: TaskOutcome) -> Command[Any]:
            emit(outcome.event())
            update: dict[str, Any] = {"messages": [outcome.tool_message()]}
            entry = outcome.ledger_entry(run_id)
            if entry is not None:
                update["delegations"] = [entry]
            return Command(update=update)

        def rejected(error: str) -> Command[Any]:
            return finish(
                TaskOutcome(
                    task_id=task_id,
                    status="failed",
                    subagent_type=subagent_type,
                    description=description,
                    execution=executor.execution,
                    error=error,
                )
            )

        if chosen is None:
            available = ", ".join(sorted(by_name)) or "none"
            return rejected(f"Unknown subagent type {subagent_type!r}. Available: {available}.")
        if not prompt.strip():
            return rejected("The prompt is empty: say what the subagent should do.")
        spec = TaskSpec(
            task_id=task_id,
            description=description,
            prompt=prompt,
            subagent_type=chosen,
            model_name=resolve_subagent_model(chosen, parent_model),
            timeout_seconds=chosen.timeout_seconds or defaults.timeout_seconds,
        )
        track = TaskTrack(task_id=task_id, emit=emit, execution=executor.execution)
        try:
            async with slots.get():
                track.link()
                outcome = await execute_task(executor, spec, parent, track)
        except asyncio.CancelledError:
            emit(
                TaskOutcome(
                    task_id=task_id,
                    status="cancelled",
                    subagent_type=chosen.name,
                    description=description,
                    execution=executor.execution,
                    error="the parent run was cancelled",
                    model=spec.model_name,
                    child_thread_id=track.child_thread_id,
                    child_run_id=track.child_run_id,
                ).event()
            )
            raise
        return finish(outcome)

    return StructuredTool.from_function(
        coroutine=task,
        name=TASK_TOOL_NAME,
        description=task_tool_description(offered),
    )
