"""Kubernetes sandbox provider, part 4: helper execs and file transfer."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.paths import VIRTUAL_UPLOADS, VIRTUAL_WORKSPACE, thread_paths
from sandbox import _pod_agent
from sandbox._k8s_api import _Entry
from sandbox._k8s_exec import ExecFailure, ExecOutcome, run_exec
from sandbox._k8s_lifecycle import _Lifecycle
from sandbox._k8s_pods import (
    ANN_LAST_ACTIVITY,
    CONTAINER_NAME,
    format_time,
)
from sandbox.base import (
    SandboxError,
    SandboxNotFoundError,
    SandboxPathError,
)
from sandbox.env import filter_env

logger = logging.getLogger("sandbox.kubernetes")

_BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
}
# The exec's whole argv: this bootstrap reads the compressed helper (its length
# is argv[1]) from stdin and runs it; the helper then reads the request (its
# length is the next argument) and any payload from stdin. Nothing
# model-controlled is ever in the exec URL.
_BOOTSTRAP = (
    "import sys,zlib;n=int(sys.argv.pop(1));"
    "exec(compile(zlib.decompress(sys.stdin.buffer.read(n)),'deerflow_pod_agent','exec'))"
)
_PID = re.compile(rb"DEERFLOW-PID (\d+)\n")
_MAX_JSON_REPLY = 8 * 1024 * 1024  # listings and search results


@dataclass
class _HelperResult:
    payload: bytes
    result: dict[str, Any]
    recreated: bool


class _Transfer(_Lifecycle):
    """Run the helper in a thread's pod; copy HTTP uploads in."""

    def command_env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        """A command's whole environment: fixed base, config, caller; never secrets.

        Nothing of the server's own environment reaches the pod.
        """
        merged = dict(_BASE_ENV)
        merged.update(filter_env(self.config.env, env, extra_patterns=self.secret_env_patterns))
        merged["PWD"] = VIRTUAL_WORKSPACE
        return merged

    async def _pod_for_op(self, entry: _Entry) -> str:
        if entry.ready and not entry.verify:
            return entry.pod_name
        async with entry.lock:
            if not entry.ready or entry.verify:
                await self._ensure_pod(entry, activate=False)
            return entry.pod_name

    async def helper(
        self,
        entry: _Entry,
        request: dict[str, Any],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        max_stdout: int | None = None,
    ) -> _HelperResult:
        """Run one helper request in the entry's pod; recreate a vanished pod once."""
        await self._connect()
        limit = max_stdout if max_stdout is not None else _MAX_JSON_REPLY
        if timeout is not None:
            budget = timeout
        else:  # file operations: a base allowance plus one second per MiB moved
            moved = len(stdin or b"") + (max_stdout or 0)
            budget = self.config.api_timeout_seconds + 60.0 + moved / (1024 * 1024)
        encoded = json.dumps(request).encode("utf-8")
        code = self._helper_code
        argv = [self.config.python, "-I", "-S", "-c", _BOOTSTRAP, str(len(code)), str(len(encoded))]
        data = code + encoded + (stdin or b"")
        for attempt in range(2):
            pod = await self._pod_for_op(entry)
            if entry.sync_pending and not entry.syncing:
                await self._sync_uploads(entry)
                pod = await self._pod_for_op(entry)
            try:
                outcome = await self._exec(entry, pod, argv, data, budget, limit)
            except ExecFailure as failure:
                if failure.kind == "gone" and attempt == 0:
                    entry.ready = False
                    entry.verify = True
                    continue
                raise self._exec_error(entry, failure) from None
            recreated = entry.recreated
            entry.recreated = False
            self._touch(entry)
            return _HelperResult(*self._helper_result(outcome), recreated=recreated)
        raise SandboxError(f"sandbox pod {entry.pod_name} is not running; try again")

    async def _sync_uploads(self, entry: _Entry) -> None:
        """Copy files uploaded over HTTP (host thread directory) into the pod.

        Only what changed since the last copy into this pod moves; with no new
        uploads this makes no API call. A failure is logged, not raised: the run
        goes on and a missing file reads as missing.
        """
        entry.sync_pending = False
        entry.syncing = True
        try:
            await self._install_skills(entry)
            if self._data_root is None:
                return
            folder = thread_paths(self._data_root, entry.user_id, entry.thread_id).uploads
            found = await self._call(_scan_uploads, folder)
            for name, signature in sorted(found.items()):
                if entry.synced.get(name) == signature:
                    continue
                data = await self._call(_read_upload, folder / name, self.config.max_file_bytes)
                if data is None:
                    logger.warning("upload %s is not copied into the sandbox (too large)", name)
                    continue
                await self.helper(
                    entry,
                    {"op": "write", "path": f"{VIRTUAL_UPLOADS}/{name}", "size": len(data)},
                    stdin=data,
                )
                entry.synced[name] = signature
        except (SandboxError, OSError) as exc:
            entry.sync_pending = True
            logger.warning("could not copy uploads into sandbox pod %s: %s", entry.pod_name, exc)
        finally:
            entry.syncing = False

    async def _install_skills(self, entry: _Entry) -> None:
        """Copy the skills projection into the pod once per pod and content digest."""
        if self._skills is None:
            return
        payload = await self._call(self._skills)
        if payload is None or entry.skills_digest == payload.digest:
            return
        await self.helper(
            entry,
            {"op": "install_skills", "digest": payload.digest, "size": len(payload.archive)},
            stdin=payload.archive,
        )
        entry.skills_digest = payload.digest

    def _exec_error(self, entry: _Entry, failure: ExecFailure) -> SandboxError:
        if failure.kind == "forbidden":
            return SandboxError(
                f"the server may not exec into sandbox pods (403 Forbidden: {failure.message}); "
                "the Role needs pods/exec get and create (deploy/k8s/sandbox)"
            )
        if failure.kind == "unauthorized":
            return SandboxError(
                f"the Kubernetes API rejected the server's credentials ({failure.message})"
            )
        entry.verify = True
        if failure.kind == "dropped":
            return SandboxError(
                f"the connection to sandbox pod {entry.pod_name} dropped during the operation "
                f"({failure.message}); it may not have completed"
            )
        if failure.kind == "deadline":
            return SandboxError(f"sandbox pod {entry.pod_name} did not answer in time")
        if failure.kind == "gone":
            return SandboxError(f"sandbox pod {entry.pod_name} is not running ({failure.message})")
        if failure.kind == "unreachable":
            return SandboxError(f"the Kubernetes API is unreachable ({failure.message}); try again")
        return SandboxError(
            f"the exec into sandbox pod {entry.pod_name} was refused ({failure.message})"
        )

    async def _exec(
        self,
        entry: _Entry,
        pod: str,
        argv: list[str],
        stdin: bytes | None,
        budget: float,
        max_stdout: int,
    ) -> ExecOutcome:
        configuration = self._configuration
        assert configuration is not None
        holder: dict[str, Any] = {}
        stderr = bytearray()
        deadline = time.monotonic() + budget
        future = asyncio.ensure_future(
            self._call_exec(
                run_exec,
                configuration,
                self.config.namespace,
                pod,
                CONTAINER_NAME,
                argv,
                stdin=stdin,
                deadline=deadline,
                max_stdout=max_stdout,
                on_open=functools.partial(holder.__setitem__, "ws"),
                stderr_sink=stderr,
            )
        )
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The run was cancelled: stop the command in the pod, not just the stream.
            found = _PID.search(bytes(stderr))
            if found:
                self._spawn(self._kill_command(entry, int(found.group(1))), "k8s-sandbox-kill")
            ws = holder.get("ws")
            if ws is not None:
                with contextlib.suppress(Exception):
                    await self._call(ws.close)
            raise

    async def _kill_command(self, entry: _Entry, pid: int) -> None:
        try:
            await self.helper(entry, {"op": "kill", "pid": pid})
        except SandboxError as exc:
            logger.warning("could not stop a cancelled command in %s: %s", entry.pod_name, exc)

    def _helper_result(self, outcome: ExecOutcome) -> tuple[bytes, dict[str, Any]]:
        result = _parse_result(outcome.stderr)
        if result is None:
            stderr = outcome.stderr.decode("utf-8", "replace").strip()
            code = outcome.exit_code
            if code in (126, 127) or "not found" in stderr.lower():
                raise SandboxError(
                    f"the sandbox image cannot run the helper ({self.config.python!r}: exit {code}: "
                    f"{stderr[-300:]}); the Kubernetes provider needs python3 in the image"
                )
            raise SandboxError(f"the sandbox helper failed (exit {code}): {stderr[-500:]}")
        if not result.get("ok"):
            message = str(result.get("message") or "the sandbox operation failed")
            if result.get("kind") in ("path", "read_only"):
                raise SandboxPathError(message)
            if result.get("kind") == "not_found":
                raise SandboxNotFoundError(message)
            raise SandboxError(message)
        return outcome.stdout, result

    def _touch(self, entry: _Entry) -> None:
        """Record activity; refresh the pod's annotation now and then (not per call)."""
        now = self._clock()
        entry.last_activity = now
        refresh = min(self.config.idle_timeout_seconds / 3.0, 300.0)
        if now - entry.last_touch_patch < refresh:
            return
        entry.last_touch_patch = now
        name = entry.pod_name
        body = {"metadata": {"annotations": {ANN_LAST_ACTIVITY: format_time(now)}}}

        async def patch() -> None:
            with contextlib.suppress(Exception):
                await self._patch_pod(name, body)

        self._spawn(patch(), "k8s-sandbox-touch")


def _scan_uploads(folder: Path) -> dict[str, tuple[int, int]]:
    """Regular files directly in ``folder`` (links skipped): name -> (size, mtime_ns)."""
    found: dict[str, tuple[int, int]] = {}
    try:
        with os.scandir(folder) as entries:
            for item in entries:
                if item.is_file(follow_symlinks=False):
                    info = item.stat(follow_symlinks=False)
                    found[item.name] = (info.st_size, info.st_mtime_ns)
    except FileNotFoundError:
        pass
    return found


def _read_upload(path: Path, limit: int) -> bytes | None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_size > limit:
            return None
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None


def _parse_result(stderr: bytes) -> dict[str, Any] | None:
    marker = _pod_agent.RESULT_MARKER.encode()
    index = stderr.rfind(marker)
    if index < 0:
        return None
    line = stderr[index + len(marker) :].split(b"\n", 1)[0]
    try:
        value = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
