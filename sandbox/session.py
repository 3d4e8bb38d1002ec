"""How a tool call finds its sandbox: state's ``sandbox_id``, checked, else acquire.

``SandboxMiddleware`` resolves the sandbox lazily, right before the first
sandbox tool runs, and binds it for the duration of that call (a ContextVar,
so parallel tool calls each see their own binding). Tools read the binding;
without the middleware they resolve it themselves and persist the id through
their own ``Command``. Either way the ``sandbox_id`` read from state is only a
hint: it is used only if the provider still holds that sandbox *and* it
belongs to this run's user and thread, because a client can edit state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from runtime.config import Settings
from runtime.identity import make_safe_user_id, resolve_runtime_user_id
from sandbox.base import Sandbox, SandboxError, SandboxProvider
from sandbox.provider import get_sandbox_provider

__all__ = [
    "SandboxBinding",
    "bind_sandbox",
    "current_binding",
    "resolve_binding",
    "run_id_of",
    "safe_thread_id",
    "state_sandbox_id",
    "thread_id_of",
]


@dataclass(frozen=True)
class SandboxBinding:
    """The sandbox one tool call uses, and whether state must learn its id."""

    provider: SandboxProvider
    sandbox: Sandbox
    settings: Settings
    user_id: str
    thread_id: str
    needs_persist: bool


_current: ContextVar[SandboxBinding | None] = ContextVar("deerflow_sandbox_binding", default=None)


def current_binding() -> SandboxBinding | None:
    """The binding SandboxMiddleware set for the running tool call, if any."""
    return _current.get()


@contextlib.contextmanager
def bind_sandbox(binding: SandboxBinding) -> Iterator[SandboxBinding]:
    token = _current.set(binding)
    try:
        yield binding
    finally:
        _current.reset(token)


def _configurable_of(runtime: Any) -> Mapping[str, Any]:
    config = getattr(runtime, "config", None)
    if isinstance(config, Mapping):
        configurable = config.get("configurable")
        if isinstance(configurable, Mapping):
            return configurable
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable") or {}
    except RuntimeError:
        return {}
    return configurable if isinstance(configurable, Mapping) else {}


def thread_id_of(runtime: Any) -> str | None:
    """The run's thread id: execution info, then the config."""
    info = getattr(runtime, "execution_info", None)
    value = getattr(info, "thread_id", None)
    if not value:
        value = _configurable_of(runtime).get("thread_id")
    return str(value) if value else None


def run_id_of(runtime: Any) -> str | None:
    info = getattr(runtime, "execution_info", None)
    value = getattr(info, "run_id", None)
    if not value:
        value = _configurable_of(runtime).get("run_id")
    return str(value) if value else None


def safe_thread_id(raw: str) -> str:
    """Thread ids become path components; the same rule as user ids keeps them safe."""
    return make_safe_user_id(raw)


def state_sandbox_id(state: Any) -> str | None:
    sandbox = state.get("sandbox") if isinstance(state, Mapping) else None
    if isinstance(sandbox, Mapping):
        value = sandbox.get("sandbox_id")
        if isinstance(value, str) and value:
            return value
    return None


async def resolve_binding(
    settings: Settings,
    state: Any,
    runtime: Any,
    *,
    provider: SandboxProvider | None = None,
) -> SandboxBinding:
    """Find (or acquire) the sandbox of this run's user and thread."""
    raw_thread = thread_id_of(runtime)
    if not raw_thread:
        raise SandboxError(
            "this run has no thread_id, and the sandbox belongs to a thread; run on a thread"
        )
    user_id = resolve_runtime_user_id(runtime)
    thread_id = safe_thread_id(raw_thread)
    provider = provider or get_sandbox_provider(settings)
    known = state_sandbox_id(state)
    if known:
        sandbox = provider.get(known)
        if sandbox is not None and sandbox.belongs_to(user_id, thread_id):
            return SandboxBinding(provider, sandbox, settings, user_id, thread_id, False)
    sandbox_id = await provider.acquire(thread_id, user_id=user_id)
    sandbox = provider.get(sandbox_id)
    if sandbox is None:
        raise SandboxError(f"sandbox {sandbox_id} disappeared right after it was acquired")
    return SandboxBinding(provider, sandbox, settings, user_id, thread_id, sandbox_id != known)
