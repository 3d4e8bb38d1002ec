"""Kubernetes sandbox provider: one locked-down pod per (user, thread).

Select it with ``sandbox.use: sandbox.kubernetes:KubernetesSandboxProvider`` and
configure ``sandbox.kubernetes`` (see ``config.example.yaml``).

How it works, briefly:

- A (user, thread) maps to a stable pod name (a hash of both). ``acquire``
  first patches that pod active (one call that also proves it exists and is
  ready: no list on the hot path); only if it is missing does it claim a warm
  pod or create one and wait for readiness with a watch.
- Every operation is a pods/exec of a small Python helper (``_pod_agent``)
  that receives itself, its JSON request and any file bytes on stdin, each
  part counted, so it works without end-of-stdin (exec protocol v4), the exec
  URL stays short, and no model-controlled text is spliced into shell source.
- An idle reaper (an asyncio task in the server process) deletes pods idle
  longer than the timeout; on start the provider reconciles the pods it owns.
- The official ``kubernetes`` client is synchronous: every call runs on a
  dedicated thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from runtime.config import Settings
from runtime.identity import make_safe_user_id
from sandbox._k8s_api import _Entry, _NotFound
from sandbox._k8s_pods import (
    ANN_HEARTBEAT,
    ANN_HOLDER,
    ANN_LAST_ACTIVITY,
    LABEL_STATE,
    STATE_IDLE,
    format_time,
    sandbox_key,
    sandbox_name,
)
from sandbox._k8s_transfer import _BOOTSTRAP as _BOOTSTRAP  # re-exported (helper tests)
from sandbox._k8s_transfer import _parse_result as _parse_result  # re-exported
from sandbox._k8s_transfer import _Transfer
from sandbox.base import (
    CommandResult,
    GrepMatch,
    Sandbox,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
)
from sandbox.paths import parse_virtual_path
from sandbox.skills import pod_skills_source

__all__ = ["KubernetesSandbox", "KubernetesSandboxProvider"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Extra wall time an exec may take beyond the command's own timeout (process
# start, transfer); past it the stream is abandoned.
_EXEC_GRACE = 30.0
_RECREATED_NOTE = (
    "[sandbox: this thread's pod was gone (reaped when idle, deleted or evicted) and was "
    "recreated; files written before are lost]\n"
)
MAX_GREP_RESULTS = 1000


def _virtual(path: Any, *, write: bool = False) -> str:
    """Validate a virtual path before anything reaches the pod (the pod re-checks links)."""
    parsed = parse_virtual_path(path)
    if write and not parsed.writable:
        raise SandboxPathError(f"{parsed}: {parsed.root} is read-only")
    return parsed.virtual


def _check_relative_pattern(pattern: Any) -> str:
    if not isinstance(pattern, str) or not pattern.strip():
        raise SandboxError("glob pattern is empty")
    if pattern.startswith("/") or ".." in pattern.split("/") or "\x00" in pattern:
        raise SandboxPathError(
            f"glob pattern {pattern!r} must be relative to `path` and must not contain '..'"
        )
    return pattern


def _check_search_pattern(pattern: Any, *, literal: bool, case_sensitive: bool) -> str:
    """Refuse an empty or invalid regex here, without a round trip to the pod."""
    if not isinstance(pattern, str) or pattern == "":
        raise SandboxError("pattern is empty")
    try:
        re.compile(re.escape(pattern) if literal else pattern, 0 if case_sensitive else re.I)
    except re.error as exc:
        raise SandboxError(
            f"invalid regular expression {pattern!r}: {exc}; pass literal=true to search text"
        ) from None
    return pattern


class KubernetesSandbox(Sandbox):
    """One (user, thread)'s pod. Every method is one pods/exec of the helper."""

    # /mnt/user-data lives in the pod: presented outputs are copied out through
    # download_bytes for the HTTP app to serve.
    shares_host_user_data = False

    def __init__(self, sandbox_id: str, provider: KubernetesSandboxProvider, entry: _Entry):
        super().__init__(sandbox_id, user_id=entry.user_id, thread_id=entry.thread_id)
        self._provider = provider
        self._entry = entry

    @property
    def pod_name(self) -> str:
        return self._entry.pod_name

    async def execute_command(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        if not isinstance(command, str) or not command.strip():
            raise SandboxError("command is empty")
        if "\x00" in command:
            raise SandboxError("command contains a NUL byte")
        provider = self._provider
        limit = provider.command_timeout if timeout is None else float(timeout)
        if limit <= 0:
            raise SandboxError(f"timeout must be positive, got {timeout}")
        request = {
            "op": "exec",
            "command": command,
            "env": provider.command_env(env),
            "timeout": limit,
            "max_output": provider.max_output_bytes,
            "shell": provider.config.shell,
            "limits": provider.command_limits,
        }
        done = await provider.helper(
            self._entry,
            request,
            timeout=limit + _EXEC_GRACE,
            max_stdout=provider.max_output_bytes + 1024,
        )
        result = done.result
        head_len = int(result.get("head") or 0)
        total = int(result.get("total") or 0)
        head = done.payload[:head_len].decode("utf-8", "replace")
        tail = done.payload[head_len:].decode("utf-8", "replace")
        omitted = total - len(done.payload)
        if omitted > 0:
            output = (
                f"{head}\n\n[... output truncated: {omitted} of {total} bytes omitted; "
                f"redirect large output to a file and read parts of it ...]\n\n{tail}"
            )
        else:
            output = head + tail
        if done.recreated:
            output = _RECREATED_NOTE + output
        return CommandResult(
            output=output,
            exit_code=int(result.get("exit_code", -1)),
            timed_out=bool(result.get("timed_out")),
            truncated=omitted > 0,
        )

    async def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        target = _virtual(path)
        if start_line is not None and start_line < 1:
            raise SandboxError(f"start_line must be >= 1, got {start_line}")
        if end_line is not None and end_line < (start_line or 1):
            raise SandboxError(f"end_line ({end_line}) is before start_line ({start_line or 1})")
        limit = self._provider.max_read_bytes
        done = await self._provider.helper(
            self._entry,
            {
                "op": "read",
                "mode": "text",
                "path": target,
                "start_line": start_line,
                "end_line": end_line,
                "max_bytes": limit,
            },
            max_stdout=limit + 1,
        )
        return done.payload.decode("utf-8", "replace")

    async def write_file(self, path: str, content: str, append: bool = False) -> None:
        if not isinstance(content, str):
            raise SandboxError("content must be a string")
        await self._write(path, content.encode("utf-8", "surrogatepass"), append=append)

    async def upload_bytes(self, path: str, data: bytes) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise SandboxError("data must be bytes")
        await self._write(path, bytes(data), append=False)

    async def _write(self, path: str, data: bytes, *, append: bool) -> None:
        target = _virtual(path, write=True)
        limit = self._provider.config.max_file_bytes
        if len(data) > limit:
            raise SandboxError(f"{target}: {len(data)} bytes is more than the {limit}-byte limit")
        await self._provider.helper(
            self._entry,
            {"op": "write", "path": target, "size": len(data), "append": bool(append)},
            stdin=data,
        )

    async def download_bytes(self, path: str) -> bytes:
        """The file's bytes, checked against the size the helper reports it sent.

        A stream that delivers fewer bytes than the helper wrote is retried
        once and then refused, never returned as if it were the whole file.
        (The short reads once seen on the test cluster were the exec reader
        dropping buffered frames, fixed in ``_k8s_exec``; this stays as a
        defence against any other truncation.)
        """
        target = _virtual(path)
        limit = self._provider.config.max_file_bytes
        request = {"op": "read", "mode": "bytes", "path": target, "max_bytes": limit}
        for _ in range(2):
            done = await self._provider.helper(self._entry, request, max_stdout=limit + 1)
            size = done.result.get("size")
            if not isinstance(size, int) or size == len(done.payload):
                return done.payload
            logger.warning(
                "sandbox %s: %s arrived short (%d of %d bytes); retrying",
                self._entry.pod_name,
                path,
                len(done.payload),
                size,
            )
        raise SandboxError(f"{path}: the transfer from the sandbox was incomplete; try again")

    async def is_file(self, path: str) -> bool:
        try:
            target = _virtual(path)
        except SandboxError:
            return False
        done = await self._provider.helper(self._entry, {"op": "is_file", "path": target})
        return done.payload.strip() == b"true"

    async def list_dir(self, path: str, max_depth: int = 2) -> list[str]:
        target = _virtual(path)
        depth = min(max(int(max_depth), 1), 5)
        done = await self._provider.helper(
            self._entry, {"op": "list", "path": target, "max_depth": depth}
        )
        return [str(p) for p in _json_list(done.payload)]

    async def glob(self, pattern: str, path: str) -> list[str]:
        _check_relative_pattern(pattern)
        target = _virtual(path)
        done = await self._provider.helper(
            self._entry,
            {
                "op": "glob",
                "pattern": pattern,
                "path": target,
                "timeout": self._provider.search_timeout,
            },
        )
        return [str(p) for p in _json_list(done.payload)]

    async def grep(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        max_results: int = 100,
    ) -> list[GrepMatch]:
        _check_search_pattern(pattern, literal=literal, case_sensitive=case_sensitive)
        if glob is not None:
            _check_relative_pattern(glob)
        target = _virtual(path)
        done = await self._provider.helper(
            self._entry,
            {
                "op": "grep",
                "pattern": pattern,
                "path": target,
                "glob": glob,
                "literal": bool(literal),
                "case_sensitive": bool(case_sensitive),
                "max_results": min(max(int(max_results), 1), MAX_GREP_RESULTS),
                "max_bytes": self._provider.max_read_bytes,
                "timeout": self._provider.search_timeout,
            },
        )
        return [
            GrepMatch(path=str(p), line_number=int(n), line=str(line))
            for p, n, line in _json_list(done.payload)
        ]


def _json_list(payload: bytes) -> list[Any]:
    try:
        value = json.loads(payload.decode("utf-8", "replace"))
    except ValueError:
        raise SandboxError("the sandbox helper returned an unreadable result") from None
    if not isinstance(value, list):
        raise SandboxError("the sandbox helper returned an unreadable result")
    return value


class KubernetesSandboxProvider(_Transfer, SandboxProvider):
    @classmethod
    def from_settings(cls, settings: Settings) -> KubernetesSandboxProvider:
        return cls(
            settings.sandbox.kubernetes,
            limits=settings.sandbox,
            data_root=settings.data_root_path(),
            skills=pod_skills_source(settings) if settings.skills.enabled else None,
        )

    async def acquire(self, thread_id: str, *, user_id: str) -> str:
        for label, value in (("user_id", user_id), ("thread_id", thread_id)):
            if not isinstance(value, str) or not value or make_safe_user_id(value) != value:
                raise SandboxError(f"unsafe {label} {value!r} for a sandbox")
        await self.start()
        key = sandbox_key(self.config.server_id, user_id, thread_id)
        sandbox_id = sandbox_name(key)
        entry = self._entries.get(sandbox_id)
        if entry is None:
            entry = _Entry(
                key=key,
                sandbox_id=sandbox_id,
                user_id=user_id,
                thread_id=thread_id,
                pod_name=sandbox_id,
            )
            self._entries[sandbox_id] = entry
        async with entry.lock:
            await self._ensure_pod(entry, activate=True)
            entry.refcount += 1
            entry.last_activity = entry.last_touch_patch = self._clock()
        entry.sync_pending = True  # a new run: files may have been uploaded since
        await self._sync_uploads(entry)
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            sandbox = KubernetesSandbox(sandbox_id, self, entry)
            self._sandboxes[sandbox_id] = sandbox
        return sandbox_id

    def get(self, sandbox_id: str) -> Sandbox | None:
        return self._sandboxes.get(sandbox_id)

    async def release(self, sandbox_id: str) -> None:
        entry = self._entries.get(sandbox_id)
        if entry is None:
            return
        entry.refcount = max(0, entry.refcount - 1)
        if entry.refcount or not entry.ready:
            return
        now = self._clock()
        entry.last_activity = now
        try:
            await self._patch_pod(
                entry.pod_name,
                {
                    "metadata": {
                        "labels": {LABEL_STATE: STATE_IDLE},
                        "annotations": {
                            ANN_LAST_ACTIVITY: format_time(now),
                            ANN_HOLDER: None,
                            ANN_HEARTBEAT: None,
                        },
                    }
                },
            )
            entry.last_touch_patch = now
        except _NotFound:
            entry.ready = False
            entry.verify = True
        except SandboxError as exc:
            logger.warning("could not mark sandbox pod %s idle: %s", entry.pod_name, exc)

    @property
    def in_use(self) -> int:
        return sum(1 for entry in self._entries.values() if entry.refcount > 0)

    async def delete_thread(self, thread_id: str, *, user_id: str) -> None:
        """Delete the thread's pod (a claimed warm pod too) and its workspace volume."""
        for label, value in (("user_id", user_id), ("thread_id", thread_id)):
            if not isinstance(value, str) or not value or make_safe_user_id(value) != value:
                raise SandboxError(f"unsafe {label} {value!r} for a sandbox")
        await self._connect()
        key = sandbox_key(self.config.server_id, user_id, thread_id)
        sandbox_id = sandbox_name(key)
        entry = self._entries.pop(sandbox_id, None)
        self._sandboxes.pop(sandbox_id, None)
        names = {sandbox_id} | {p.name for p in await self._list_pods() if p.key == key}
        if entry is not None:
            names.add(entry.pod_name)
        for name in sorted(names):
            await self._delete_pod(name)
        if self.config.workspace.type == "pvc":
            with contextlib.suppress(_NotFound):
                await self._pod_call(
                    "delete a workspace volume claim",
                    self._api.delete_namespaced_persistent_volume_claim,
                    f"{sandbox_id}-data",
                    self.config.namespace,
                )

    async def reset(self) -> None:
        """Forget every sandbox and stop background work; pods stay for the reaper."""
        await self._stop_background()
        self._entries.clear()
        self._sandboxes.clear()
        self._started = False

    async def aclose(self) -> None:
        """Stop background work, hand the Lease on and release the thread pools (shutdown)."""
        await self._stop_background()
        await self._release_lease()
        await self.reset()
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._exec_executor.shutdown(wait=False, cancel_futures=True)

    async def start(self) -> None:
        """Connect, reconcile the pods this deployment owns, start the reaper.

        Called lazily by the first ``acquire``; call it at server start-up to
        reconcile orphans before the first run.
        """
        if self._started:
            return
        if self._closed:
            raise SandboxError("the Kubernetes sandbox provider is closed")
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            await self._connect()
            try:
                self.last_reconcile = await self.reconcile()
            except SandboxError as exc:
                logger.warning("sandbox pod reconciliation failed: %s", exc)
            self._reaper = asyncio.create_task(self._reaper_loop(), name="k8s-sandbox-reaper")
            self._started = True
            self._schedule_replenish()
