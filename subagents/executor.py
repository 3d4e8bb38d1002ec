"""Running one delegated task: in-process, or as a run of the ``subagent`` graph on the server.

Both runners report through a ``TaskTrack`` (progress events, child ids, the
latest messages) and ``execute_task`` turns whatever happened into one
``TaskOutcome``, so the two modes produce the same results, statuses and events.

In-process isolation: the child graph has no checkpointer, gets a configurable
of its own (so none of the parent's ``__pregel_*`` keys, which would make it a
subgraph writing into the parent's checkpoint history), and runs as a new task
in a context without the parent's runnable config (defence in depth: nothing of
the parent's run is inherited implicitly). It shares the parent's identity (the
server's auth user in ``configurable``), thread id, thread data and sandbox.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import logging
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.errors import GraphRecursionError
from langgraph_sdk.client import LangGraphClient

from runtime.config import ConfigError, Settings
from runtime.identity import principal_of
from subagents.contract import StopReason
from subagents.credentials import delegation_header, mint_delegation_token
from subagents.messages import (
    ai_messages,
    error_ending,
    final_text,
    message_id,
    message_text,
    stop_reason_of,
    sum_token_usage,
    terminal_citations,
    tool_call_names,
)
from subagents.results import TaskOutcome
from subagents.types import SubagentType

__all__ = [
    "ChildRunError",
    "InProcessRunner",
    "ParentContext",
    "RemoteRunner",
    "RemoteUnavailableError",
    "SubagentBuilder",
    "SubagentRunner",
    "TaskSpec",
    "TaskTrack",
    "execute_task",
    "make_runner",
    "run_isolated",
]

logger = logging.getLogger(__name__)

_ERROR_LIMIT = 500
_PROGRESS_TEXT_LIMIT = 200
_CANCEL_GRACE_SECONDS = 5.0
_LINK_PREFIX = "deerflow_"


@dataclass(frozen=True)
class ParentContext:
    """What a subagent inherits from the run that delegates to it."""

    thread_id: str | None = None
    run_id: str | None = None
    auth_user: Any = None
    auth_user_id: str | None = None
    permissions: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    sandbox: Any = None
    thread_data: Any = None
    skill_allowlist: tuple[str, ...] | None = None
    """The skills the parent may use (None: every enabled one); the child can only narrow it."""

    @classmethod
    def from_run(cls, config: Mapping[str, Any] | None, state: Any) -> ParentContext:
        """Read the parent's run config (as the server set it) and state."""
        config = config or {}
        configurable = config.get("configurable") or {}
        metadata = config.get("metadata") or {}

        def text(value: Any) -> str | None:
            return value if isinstance(value, str) and value else None

        permissions = configurable.get("langgraph_auth_permissions")
        user = configurable.get("langgraph_auth_user")
        roles = _user_field(user, "roles")
        state_map = state if isinstance(state, Mapping) else {}
        return cls(
            thread_id=text(configurable.get("thread_id")) or text(metadata.get("thread_id")),
            run_id=text(configurable.get("run_id")) or text(metadata.get("run_id")),
            auth_user=user,
            auth_user_id=text(configurable.get("langgraph_auth_user_id")),
            permissions=tuple(p for p in permissions if isinstance(p, str))
            if isinstance(permissions, list | tuple)
            else (),
            roles=tuple(r for r in roles if isinstance(r, str))
            if isinstance(roles, list | tuple)
            else (),
            sandbox=state_map.get("sandbox"),
            thread_data=state_map.get("thread_data"),
        )

    def identity(self) -> str | None:
        """The owner the parent's thread was stamped with (None without server auth).

        ``principal_of`` maps the LangGraph Studio user the way the auth
        handlers do, so the child thread gets the very same owner.
        """
        found = principal_of(self.auth_user)
        if found:
            return found
        return self.auth_user_id


def _user_field(user: Any, key: str) -> Any:
    """A field of the server's user object (a dict, or a proxy with ``get``)."""
    if user is None:
        return None
    if isinstance(user, Mapping):
        return user.get(key)
    getter = getattr(user, "get", None)
    if callable(getter):
        try:
            return getter(key)
        except Exception:
            return None
    return getattr(user, key, None)


@dataclass(frozen=True)
class TaskSpec:
    """One task to run: the resolved type, model and timeout."""

    task_id: str
    description: str
    prompt: str
    subagent_type: SubagentType
    model_name: str | None
    timeout_seconds: float

    def link_metadata(self, parent: ParentContext) -> dict[str, Any]:
        """Parent linkage recorded on the child (informational: metadata is not trusted)."""
        return {
            f"{_LINK_PREFIX}parent_thread_id": parent.thread_id,
            f"{_LINK_PREFIX}parent_run_id": parent.run_id,
            f"{_LINK_PREFIX}task_id": self.task_id,
            f"{_LINK_PREFIX}subagent_type": self.subagent_type.name,
        }


Emit = Callable[[dict[str, Any]], None]


@dataclass
class TaskTrack:
    """The live progress of one execution, filled in by the runner."""

    task_id: str
    emit: Emit
    execution: str
    child_thread_id: str | None = None
    child_run_id: str | None = None
    messages: list[Any] = field(default_factory=list)
    steps: int = 0
    _seen: set[str] = field(default_factory=set)

    def _running(self, **extra: Any) -> None:
        event: dict[str, Any] = {
            "type": "task_running",
            "task_id": self.task_id,
            "status": "running",
            "execution": self.execution,
            "step": self.steps,
        }
        if self.child_thread_id:
            event["child_thread_id"] = self.child_thread_id
        if self.child_run_id:
            event["child_run_id"] = self.child_run_id
        event.update(extra)
        self.emit(event)

    def link(self, *, child_thread_id: str | None = None, child_run_id: str | None = None) -> None:
        if child_thread_id:
            self.child_thread_id = child_thread_id
        if child_run_id:
            self.child_run_id = child_run_id
        self._running()

    def observe(self, messages: Any, *, complete: bool) -> None:
        """New messages (``complete``: the whole list so far, else only new ones)."""
        if not isinstance(messages, list):
            return
        if complete:
            self.messages = list(messages)
        else:
            self.messages.extend(messages)
        for message in ai_messages(messages):
            key = message_id(message)
            if key is not None:
                if key in self._seen:
                    continue
                self._seen.add(key)
            self.steps += 1
            text = message_text(message).strip()
            extra: dict[str, Any] = {"tool_calls": tool_call_names(message)}
            if text:
                extra["message"] = text[:_PROGRESS_TEXT_LIMIT]
            self._running(**extra)


class ChildRunError(Exception):
    """A remote child run that did not succeed (``kind``: error, interrupted, ...)."""

    def __init__(self, kind: str, message: str, *, error_type: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.error_type = error_type


class RemoteUnavailableError(RuntimeError):
    """Remote execution has no server to talk to."""


class SubagentRunner(ABC):
    """Runs a ``TaskSpec`` to its end; raises when it does not succeed."""

    execution: str

    @abstractmethod
    async def run(self, spec: TaskSpec, parent: ParentContext, track: TaskTrack) -> None: ...

    def timeout_hint(self, track: TaskTrack) -> str | None:
        """Extra words for a timed-out task, when the runner can say why."""
        return None


async def run_isolated(coro: Coroutine[Any, Any, None]) -> None:
    """Await ``coro`` as a new task outside the caller's runnable config.

    Cancelling the caller cancels the task; the caller waits a short grace
    period for it to finish unwinding, then re-raises.
    """
    context = contextvars.copy_context()
    context.run(var_child_runnable_config.set, None)
    task = asyncio.get_running_loop().create_task(coro, context=context)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=_CANCEL_GRACE_SECONDS)
        if not done:
            logger.warning("a cancelled subagent did not stop within %ss", _CANCEL_GRACE_SECONDS)
        elif not task.cancelled() and task.exception() is not None:
            logger.debug("a cancelled subagent ended with an error", exc_info=task.exception())
        raise


def child_config(spec: TaskSpec, parent: ParentContext) -> RunnableConfig:
    """The in-process child's config: the parent's identity and thread, the task's type."""
    configurable: dict[str, Any] = {"subagent_type": spec.subagent_type.name}
    if spec.model_name:
        configurable["model_name"] = spec.model_name
    if parent.thread_id:
        configurable["thread_id"] = parent.thread_id
    if parent.auth_user is not None:
        configurable["langgraph_auth_user"] = parent.auth_user
    if parent.auth_user_id:
        configurable["langgraph_auth_user_id"] = parent.auth_user_id
    if parent.permissions:
        configurable["langgraph_auth_permissions"] = list(parent.permissions)
    if parent.skill_allowlist is not None:
        configurable["skill_allowlist"] = list(parent.skill_allowlist)
    link = {k: v for k, v in spec.link_metadata(parent).items() if v is not None}
    configurable.update(link)
    return {
        "configurable": configurable,
        "metadata": dict(link),
        "run_name": f"subagent:{spec.subagent_type.name}",
    }


SubagentBuilder = Callable[[Settings, RunnableConfig], Any]
"""Builds the subagent graph for one task (``graphs.subagent.build_subagent``)."""


class InProcessRunner(SubagentRunner):
    """A fresh subagent graph in this process (the default).

    The graph builder is passed in by the composition root (``graphs``): this
    layer runs subagents but does not know how their graphs are assembled.
    """

    execution = "inprocess"

    def __init__(self, settings: Settings, build_subagent: SubagentBuilder | None = None) -> None:
        self._settings = settings
        self._build = build_subagent

    async def run(self, spec: TaskSpec, parent: ParentContext, track: TaskTrack) -> None:
        if self._build is None:
            raise RuntimeError(
                "in-process subagents need a graph builder: the agent was built without one "
                "(graphs.lead_agent passes graphs.subagent.build_subagent)"
            )
        config = child_config(spec, parent)
        graph = await asyncio.to_thread(self._build, self._settings, config)
        inputs: dict[str, Any] = {"messages": [HumanMessage(content=spec.prompt)]}
        if parent.sandbox is not None:
            inputs["sandbox"] = parent.sandbox
        if parent.thread_data is not None:
            inputs["thread_data"] = parent.thread_data

        async def drive() -> None:
            async for values in graph.astream(inputs, config, stream_mode="values"):
                if isinstance(values, Mapping):
                    track.observe(values.get("messages"), complete=True)

        await run_isolated(drive())


def _asgi_transport_class() -> Any:
    """The server's streaming ASGI transport when available, else httpx's (buffered)."""
    try:
        module = importlib.import_module("langgraph_api.asgi_transport")
    except ImportError:
        return httpx.ASGITransport
    return module.ASGITransport


class RemoteRunner(SubagentRunner):
    """A run of the registered ``subagent`` graph on a LangGraph Server.

    The server is ``subagents.remote.url`` when set, otherwise the server this
    code runs in, called through its ASGI app in-process (with authentication,
    unlike ``get_client(url=None)``). The child thread is created with the
    parent's identity (see ``subagents.credentials``), so it belongs to the same
    user, and carries the parent linkage in its metadata.
    """

    execution = "remote"

    def timeout_hint(self, track: TaskTrack) -> str | None:
        if track.steps:
            return None
        return (
            "the subagent run never took a step: if every job slot of the server is busy "
            "(langgraph dev runs one job at a time unless --n-jobs-per-worker is raised), "
            "the child run waits in the queue behind its parent"
        )

    def __init__(
        self,
        settings: Settings,
        *,
        client_factory: Callable[[dict[str, str]], LangGraphClient] | None = None,
    ) -> None:
        self._settings = settings
        self._client_factory = client_factory

    def _headers(self, spec: TaskSpec, parent: ParentContext, thread_id: str) -> dict[str, str]:
        identity = parent.identity()
        if identity is None:
            return {}
        token = mint_delegation_token(
            identity,
            thread_ids=[thread_id],
            ttl_seconds=spec.timeout_seconds + 120,
            permissions=parent.permissions,
            roles=parent.roles,
            parent_thread_id=parent.thread_id,
            parent_run_id=parent.run_id,
        )
        return delegation_header(token)

    def _client(self, headers: dict[str, str]) -> LangGraphClient:
        if self._client_factory is not None:
            return self._client_factory(headers)
        timeout = httpx.Timeout(30.0, read=None)
        url = self._settings.subagents.remote.url
        if url:
            return LangGraphClient(
                httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout)
            )
        server = sys.modules.get("langgraph_api.server")
        app = getattr(server, "app", None)
        if app is None:
            raise RemoteUnavailableError(
                "subagents.execution is 'remote' but this process is not a LangGraph Server; "
                "set subagents.remote.url (or DEERFLOW_SUBAGENTS_URL)"
            )
        transport = _asgi_transport_class()(app=app)
        http = httpx.AsyncClient(
            transport=transport,
            base_url="http://deerflow-subagents.internal",
            headers=headers,
            timeout=timeout,
        )
        return LangGraphClient(http)

    async def run(self, spec: TaskSpec, parent: ParentContext, track: TaskTrack) -> None:
        # The child thread's id is chosen here so the delegation token can be
        # bound to it (it may act on that thread only).
        thread_id = str(uuid.uuid4())
        client = self._client(self._headers(spec, parent, thread_id))
        try:
            await self._run(client, spec, parent, track, thread_id)
        finally:
            await client.aclose()

    async def _run(
        self,
        client: LangGraphClient,
        spec: TaskSpec,
        parent: ParentContext,
        track: TaskTrack,
        thread_id: str,
    ) -> None:
        metadata = {k: v for k, v in spec.link_metadata(parent).items() if v is not None}
        thread = await client.threads.create(metadata=metadata, thread_id=thread_id)
        thread_id = str(thread["thread_id"])
        track.link(child_thread_id=thread_id)
        context: dict[str, Any] = {"subagent_type": spec.subagent_type.name}
        if spec.model_name:
            context["model_name"] = spec.model_name
        if parent.skill_allowlist is not None:
            context["skill_allowlist"] = list(parent.skill_allowlist)
        error: Any = None
        inputs: dict[str, Any] = {"messages": [{"role": "user", "content": spec.prompt}]}
        try:
            async for part in client.runs.stream(
                thread_id,
                self._settings.subagents.remote.graph_id,
                input=inputs,
                context=context,
                metadata=metadata,
                stream_mode="updates",
                on_disconnect="cancel",
                multitask_strategy="reject",
            ):
                if part.event == "metadata" and isinstance(part.data, Mapping):
                    run_id = part.data.get("run_id")
                    if isinstance(run_id, str):
                        track.link(child_run_id=run_id)
                elif part.event == "updates" and isinstance(part.data, Mapping):
                    for update in part.data.values():
                        if isinstance(update, Mapping):
                            track.observe(update.get("messages"), complete=False)
                elif part.event == "error":
                    error = part.data
        except BaseException:
            if track.child_run_id:
                await _cancel_quietly(client, thread_id, track.child_run_id)
            raise
        state = await client.threads.get_state(thread_id)
        values = state.get("values") if isinstance(state, Mapping) else None
        if isinstance(values, Mapping):
            track.observe(values.get("messages"), complete=True)
        if error is not None:
            raise _child_error(error)
        if track.child_run_id is None:
            raise ChildRunError("error", "the server did not report the subagent run's id")
        run = await client.runs.get(thread_id, track.child_run_id)
        status = run.get("status")
        if status == "interrupted":
            raise ChildRunError("cancelled", "the subagent run was cancelled on the server")
        if status != "success":
            raise ChildRunError("error", f"the subagent run ended with status {status!r}")


def _child_error(data: Any) -> ChildRunError:
    if isinstance(data, Mapping):
        error_type = data.get("error")
        message = data.get("message")
        return ChildRunError(
            "error",
            str(message or error_type or "the subagent run failed"),
            error_type=str(error_type) if error_type else None,
        )
    return ChildRunError("error", str(data) or "the subagent run failed")


async def _cancel_quietly(client: LangGraphClient, thread_id: str, run_id: str) -> None:
    """Cancel a child run on the way out; never raises (the caller is unwinding)."""
    try:
        await asyncio.wait_for(
            client.runs.cancel(thread_id, run_id, wait=False), timeout=_CANCEL_GRACE_SECONDS
        )
    except BaseException as exc:
        logger.warning("could not cancel subagent run %s on thread %s: %r", run_id, thread_id, exc)


def make_runner(
    settings: Settings, build_subagent: SubagentBuilder | None = None
) -> SubagentRunner:
    """The runner ``subagents.execution`` names; in-process runs use ``build_subagent``."""
    if settings.subagents.execution == "remote":
        return RemoteRunner(settings)
    return InProcessRunner(settings, build_subagent)


def _bounded(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _ERROR_LIMIT else text[: _ERROR_LIMIT - 1] + "\u2026"


async def execute_task(
    runner: SubagentRunner, spec: TaskSpec, parent: ParentContext, track: TaskTrack
) -> TaskOutcome:
    """Run ``spec`` under its timeout and describe what happened.

    Cancellation of the caller propagates (after the runner has stopped the
    child); every other failure becomes a ``failed`` / ``timed_out`` outcome.
    """
    timeout = asyncio.timeout(spec.timeout_seconds)
    status: str = "completed"
    error: str | None = None
    stop_reason: StopReason | None = None
    try:
        async with timeout:
            await runner.run(spec, parent, track)
    except TimeoutError as exc:
        if timeout.expired():
            status = "timed_out"
            error = f"no result within {spec.timeout_seconds:g} seconds"
            hint = runner.timeout_hint(track)
            if hint:
                error = f"{error}; {hint}"
        else:
            status, error = "failed", _bounded(f"{type(exc).__name__}: {exc}")
    except GraphRecursionError:
        stop_reason = "turn_capped"
    except ChildRunError as exc:
        if exc.error_type == "GraphRecursionError":
            stop_reason = "turn_capped"
        elif exc.kind == "cancelled":
            status, error = "cancelled", _bounded(str(exc))
        else:
            label = f"{exc.error_type}: " if exc.error_type else ""
            status, error = "failed", _bounded(f"{label}{exc}")
    except (ConfigError, RemoteUnavailableError) as exc:
        status, error = "failed", _bounded(str(exc))
    except Exception as exc:
        logger.warning("subagent task %s failed", spec.task_id, exc_info=True)
        status, error = "failed", _bounded(f"{type(exc).__name__}: {exc}")
    if status == "completed" and stop_reason is None:
        failure = error_ending(track.messages)
        if failure is not None:
            status, error = "failed", _bounded(failure)
    result = final_text(track.messages)
    if status == "completed" and stop_reason is None:
        stop_reason = stop_reason_of(track.messages)
    if stop_reason is not None and status == "completed" and result is None:
        status, error = "failed", "the subagent stopped before it produced a result"
    return TaskOutcome(
        task_id=spec.task_id,
        status=status,  # type: ignore[arg-type]
        subagent_type=spec.subagent_type.name,
        description=spec.description,
        execution=runner.execution,
        result=result if status == "completed" else None,
        error=error,
        stop_reason=stop_reason,
        model=spec.model_name,
        token_usage=sum_token_usage(track.messages),
        child_thread_id=track.child_thread_id,
        child_run_id=track.child_run_id,
        citations=terminal_citations(track.messages) if status == "completed" else None,
    )
