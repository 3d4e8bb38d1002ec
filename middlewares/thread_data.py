"""ThreadDataMiddleware (spec number 5): the thread's coordinate system.

Once per run (``before_agent``) it computes where this user's thread keeps its
files, ``<data root>/users/{user_id}/threads/{thread_id}/user-data/{workspace,
uploads,outputs}``, and writes them to state ``thread_data``. Identity comes
only from ``resolve_runtime_user_id``. By default directories are created
lazily, by whoever first needs them (sandbox acquisition, an upload); with
``sandbox.thread_dirs_lazy_init: false`` they are created here, off the event
loop. It also stamps ``run_id`` and a UTC ``timestamp`` on the latest user
message so clients can tell which turn an input belongs to.

``thread_data`` is informational: a client can edit state, so consumers
recompute paths from identity instead of trusting it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.runtime import Runtime

from auth.identity import resolve_runtime_user_id
from runtime.config import Settings
from runtime.paths import ThreadPaths, thread_paths
from runtime.state import ThreadDataState, ThreadState
from sandbox import hostfs as _hostfs
from sandbox.base import SandboxError
from sandbox.session import run_id_of, safe_thread_id, thread_id_of

__all__ = ["ThreadDataMiddleware", "create_thread_dirs", "latest_user_message_index"]

logger = logging.getLogger(__name__)


def latest_user_message_index(messages: Sequence[Any] | None) -> int | None:
    """Index of the newest genuine user message (hidden injected ones skipped)."""
    for index in range(len(messages or ()) - 1, -1, -1):
        message = messages[index]  # type: ignore[index]
        if isinstance(message, HumanMessage) and not message.additional_kwargs.get("hide_from_ui"):
            return index
    return None


def create_thread_dirs(data_root: Any, paths: ThreadPaths) -> None:
    """Create the three directories without following links (blocking, never raises)."""
    chain = paths.user_data.relative_to(data_root).parts
    try:
        for name in ("workspace", "uploads", "outputs"):
            _hostfs.ensure_dirs(_hostfs.HostRoot("/mnt/user-data", data_root, (*chain, name)))
    except (SandboxError, OSError) as exc:
        logger.warning("cannot create thread directories under %s: %s", paths.user_data, exc)


def _stamp(messages: Sequence[AnyMessage] | None, run_id: str | None) -> AnyMessage | None:
    index = latest_user_message_index(messages)
    if index is None:
        return None
    message = messages[index]  # type: ignore[index]
    if not message.id:
        return None
    kwargs = dict(message.additional_kwargs)
    has_time = isinstance(kwargs.get("timestamp"), str)
    has_run = isinstance(kwargs.get("run_id"), str)
    if has_time and (has_run or run_id is None):
        return None
    if run_id is not None:
        kwargs["run_id"] = run_id
    kwargs["timestamp"] = datetime.now(UTC).isoformat(timespec="milliseconds")
    return message.model_copy(update={"additional_kwargs": kwargs})


class ThreadDataMiddleware(AgentMiddleware[ThreadState, Any]):
    """Thread paths into state, run stamp on the latest user message."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    state_schema = ThreadState

    def __init__(self, settings: Settings, *, lazy_init: bool | None = None) -> None:
        super().__init__()
        self._settings = settings
        self.lazy_init = settings.sandbox.thread_dirs_lazy_init if lazy_init is None else lazy_init

    def _plan(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> tuple[dict[str, Any] | None, ThreadPaths | None]:
        update: dict[str, Any] = {}
        paths: ThreadPaths | None = None
        raw_thread = thread_id_of(runtime)
        if raw_thread:
            user_id = resolve_runtime_user_id(runtime)
            thread_id = safe_thread_id(raw_thread)
            paths = thread_paths(self._settings.data_root_path(), user_id, thread_id)
            thread_data: ThreadDataState = {
                "user_id": user_id,
                "thread_id": thread_id,
                "workspace_path": str(paths.workspace),
                "uploads_path": str(paths.uploads),
                "outputs_path": str(paths.outputs),
            }
            update["thread_data"] = thread_data
        else:
            logger.debug("run has no thread_id; thread_data left unset")
        stamped = _stamp(state.get("messages"), run_id_of(runtime))
        if stamped is not None:
            update["messages"] = [stamped]
        return (update or None), paths

    def before_agent(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        update, paths = self._plan(state, runtime)
        if paths is not None and not self.lazy_init:
            create_thread_dirs(self._settings.data_root_path(), paths)
        return update

    async def abefore_agent(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        update, paths = self._plan(state, runtime)
        if paths is not None and not self.lazy_init:
            await asyncio.to_thread(create_thread_dirs, self._settings.data_root_path(), paths)
        return update
