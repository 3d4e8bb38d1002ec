"""Content probes: the newest content hash of a virtual path, for read-before-write.

ReadBeforeWriteMiddleware never trusts what a tool *returned* as "the file":
it hashes the file's current content itself, through a ``ContentProbe``.

Contract of a probe (sync ``digest`` and async ``adigest``, same meaning):

- return the SHA-256 hex digest of the file's complete current bytes;
- raise ``FileNotFoundError`` when the file does not exist (a write then
  creates it, which the gate allows);
- raise anything else when the content cannot be inspected (no sandbox yet,
  a path outside the virtual roots, a provider error): the gate then fails
  open and the tool produces its own error.

Two probes ship: ``HostPathContentProbe`` reads the local data layout
(``<data root>/users/{user}/threads/{thread}/user-data/...``, the layout the
local sandbox provider serves) and ``SandboxContentProbe`` asks the run's
sandbox through any ``SandboxProvider`` (``download_bytes``), which is what a
remote (Kubernetes) sandbox needs.
"""

from __future__ import annotations

import asyncio
import hashlib
import posixpath
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from runtime.paths import VIRTUAL_USER_DATA, thread_paths
from sandbox.base import SandboxError, SandboxPathError, SandboxProvider

__all__ = [
    "ContentProbe",
    "HostPathContentProbe",
    "ProbeTarget",
    "SandboxContentProbe",
    "normalize_virtual_path",
]

T = TypeVar("T")

_CHUNK = 1 << 20
_USER_DATA_DIRS = frozenset({"workspace", "uploads", "outputs"})


def normalize_virtual_path(path: str) -> str:
    """Lexically normalise a tool's path argument (relative = under the workspace).

    Used as the key of marks and gates, so ``notes.md``,
    ``/mnt/user-data/workspace/notes.md`` and ``/mnt/user-data/workspace/./notes.md``
    name the same file.
    """
    candidate = path.strip()
    if not candidate.startswith("/"):
        candidate = posixpath.join(f"{VIRTUAL_USER_DATA}/workspace", candidate)
    return "/" + posixpath.normpath(candidate).lstrip("/")


@dataclass(frozen=True)
class ProbeTarget:
    """Which file to probe, for whom. ``runtime`` is the tool call's ``ToolRuntime``."""

    path: str
    user_id: str
    thread_id: str | None
    sandbox_id: str | None
    runtime: Any = None

    @property
    def scope(self) -> str:
        """The gate scope: one user's thread (or sandbox) never contends with another's."""
        owner = self.thread_id or (f"sandbox:{self.sandbox_id}" if self.sandbox_id else "global")
        return f"{self.user_id}/{owner}"


@runtime_checkable
class ContentProbe(Protocol):
    def digest(self, target: ProbeTarget) -> str: ...

    async def adigest(self, target: ProbeTarget) -> str: ...


class HostPathContentProbe:
    """Hash files in the local data layout (what the local provider maps virtual paths to)."""

    def __init__(self, data_root: Path) -> None:
        self._data_root = data_root

    def host_path(self, target: ProbeTarget) -> Path:
        if not target.thread_id:
            raise SandboxError("no thread id: the thread's files cannot be located")
        path = target.path
        prefix = VIRTUAL_USER_DATA + "/"
        if not path.startswith(prefix):
            raise SandboxPathError(f"{path} is not under {VIRTUAL_USER_DATA}")
        relative = path[len(prefix) :]
        if relative.split("/", 1)[0] not in _USER_DATA_DIRS:
            raise SandboxPathError(f"{path} is not in workspace, uploads or outputs")
        user_data = thread_paths(self._data_root, target.user_id, target.thread_id).user_data
        host = user_data / relative
        root = user_data.resolve()
        resolved = host.resolve()
        if resolved != root and root not in resolved.parents:
            raise SandboxPathError(f"{path} escapes the thread's directory")
        return resolved

    def digest(self, target: ProbeTarget) -> str:
        host = self.host_path(target)
        sha = hashlib.sha256()
        with host.open("rb") as handle:  # FileNotFoundError: the file does not exist
            for chunk in iter(lambda: handle.read(_CHUNK), b""):
                sha.update(chunk)
        return sha.hexdigest()

    async def adigest(self, target: ProbeTarget) -> str:
        return await asyncio.to_thread(self.digest, target)


class SandboxContentProbe:
    """Hash a file through the run's sandbox (``download_bytes``), for any provider.

    ``provider`` is the provider or a zero-argument callable returning it (so
    the process-wide provider can be looked up lazily). The sandbox is found
    from ``state["sandbox"]["sandbox_id"]``; before SandboxMiddleware has
    persisted one, the (user, thread)'s sandbox is acquired (idempotent).
    """

    def __init__(self, provider: SandboxProvider | Callable[[], SandboxProvider]) -> None:
        self._provider = provider

    def _resolve_provider(self) -> SandboxProvider:
        if isinstance(self._provider, SandboxProvider):
            return self._provider
        return self._provider()

    async def adigest(self, target: ProbeTarget) -> str:
        provider = self._resolve_provider()
        sandbox = provider.get(target.sandbox_id) if target.sandbox_id else None
        if sandbox is None:
            if not target.thread_id:
                raise SandboxError("no sandbox and no thread id to acquire one")
            sandbox_id = await provider.acquire(target.thread_id, user_id=target.user_id)
            sandbox = provider.get(sandbox_id)
            if sandbox is None:
                raise SandboxError(f"sandbox {sandbox_id} vanished after acquisition")
        data = await sandbox.download_bytes(target.path)
        return hashlib.sha256(data).hexdigest()

    def digest(self, target: ProbeTarget) -> str:
        return _run_sync(self.adigest(target))


def _run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, in a private loop on a helper thread if a
    loop already runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    outcome: dict[str, Any] = {}

    def runner() -> None:
        try:
            outcome["value"] = asyncio.run(coroutine)
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=runner, name="content-probe", daemon=True)
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]
