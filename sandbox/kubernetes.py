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
import functools
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from runtime.config import KubernetesSandboxConfig, SandboxConfig, Settings
from runtime.identity import make_safe_user_id
from runtime.paths import VIRTUAL_UPLOADS, VIRTUAL_WORKSPACE, thread_paths
from sandbox import _pod_agent
from sandbox._k8s_exec import ExecFailure, ExecOutcome, run_exec
from sandbox._k8s_pods import (
    ANN_LAST_ACTIVITY,
    ANN_THREAD_ID,
    ANN_USER_ID,
    CONTAINER_NAME,
    LABEL_SANDBOX,
    LABEL_STATE,
    STATE_ACTIVE,
    STATE_IDLE,
    STATE_WARM,
    PodView,
    format_time,
    pod_manifest,
    pvc_manifest,
    sandbox_key,
    sandbox_name,
    server_selector,
    spec_hash,
    warm_pod_name,
)
from sandbox.base import (
    CommandResult,
    GrepMatch,
    Sandbox,
    SandboxError,
    SandboxNotFoundError,
    SandboxPathError,
    SandboxProvider,
)
from sandbox.env import filter_env
from sandbox.paths import parse_virtual_path
from sandbox.skills import PodSkills, pod_skills_source

__all__ = ["KubernetesSandbox", "KubernetesSandboxProvider"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
}
# Extra wall time an exec may take beyond the command's own timeout (process
# start, transfer); past it the stream is abandoned.
_EXEC_GRACE = 30.0
_RECREATED_NOTE = (
    "[sandbox: this thread's pod was gone (reaped when idle, deleted or evicted) and was "
    "recreated; files written before are lost]\n"
)
# The exec's whole argv: this bootstrap reads the compressed helper (its length
# is argv[1]) from stdin and runs it; the helper then reads the request (its
# length is the next argument) and any payload from stdin. Nothing
# model-controlled is ever in the exec URL.
_BOOTSTRAP = (
    "import sys,zlib;n=int(sys.argv.pop(1));"
    "exec(compile(zlib.decompress(sys.stdin.buffer.read(n)),'deerflow_pod_agent','exec'))"
)
MAX_GREP_RESULTS = 1000
_PID = re.compile(rb"DEERFLOW-PID (\d+)\n")
_MAX_JSON_REPLY = 8 * 1024 * 1024  # listings and search results


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


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or exc)


def _api_error(exc: ApiException, action: str, namespace: str) -> SandboxError:
    """A clear, model-readable error for a refused API call."""
    message = _status_message(exc)
    status = exc.status
    lowered = message.lower()
    if status == 403 and "exceeded quota" in lowered:
        return SandboxError(f"the sandbox namespace's ResourceQuota refused to {action}: {message}")
    if status == 403 and ("maximum" in lowered or "minimum" in lowered) and "per" in lowered:
        return SandboxError(f"the sandbox namespace's LimitRange refused to {action}: {message}")
    if status == 403:
        return SandboxError(
            f"the server may not {action} in namespace {namespace!r} (403 Forbidden: {message}); "
            "check the Role and RoleBinding from deploy/k8s/sandbox"
        )
    if status == 401:
        return SandboxError(f"the Kubernetes API rejected the server's credentials ({message})")
    if status == 422 and "quota" in lowered:
        return SandboxError(f"the sandbox namespace's quota refused to {action}: {message}")
    if status == 422:
        return SandboxError(f"the cluster rejected the sandbox pod (422 Invalid): {message}")
    if status == 404 and "namespace" in lowered:
        return SandboxError(f"the sandbox namespace {namespace!r} does not exist ({message})")
    if status in (0, None) or (isinstance(status, int) and status >= 500):
        return SandboxError(f"the Kubernetes API is unavailable ({message}); try again shortly")
    return SandboxError(f"could not {action} ({status}: {message})")


class _NotFound(Exception):
    pass


class _Conflict(Exception):
    pass


@dataclass
class _Entry:
    """What this process knows about one (user, thread)'s pod."""

    key: str
    sandbox_id: str
    user_id: str
    thread_id: str
    pod_name: str
    ready: bool = False
    verify: bool = False
    had_pod: bool = False
    recreated: bool = False
    refcount: int = 0
    last_activity: float = 0.0
    last_touch_patch: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Host uploads copied into the current pod: name -> (size, mtime_ns).
    synced: dict[str, tuple[int, int]] = field(default_factory=dict)
    sync_pending: bool = True
    syncing: bool = False
    skills_digest: str | None = None  # the skills projection copied into the current pod


@dataclass
class _HelperResult:
    payload: bytes
    result: dict[str, Any]
    recreated: bool


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
        target = _virtual(path)
        limit = self._provider.config.max_file_bytes
        done = await self._provider.helper(
            self._entry,
            {"op": "read", "mode": "bytes", "path": target, "max_bytes": limit},
            max_stdout=limit + 1,
        )
        return done.payload

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


class KubernetesSandboxProvider(SandboxProvider):
    """Hands out one pod per (user, thread) in the configured namespace.

    ``config`` is ``sandbox.kubernetes``; ``limits`` is the ``sandbox`` section
    (command timeout, output and read caps, extra secret env patterns shared
    with every provider). ``data_root`` is the server's data root: files
    uploaded over HTTP into a thread's host uploads directory are copied into
    its pod. ``configuration`` (a ``kubernetes.client.Configuration``)
    overrides kubeconfig/in-cluster loading. ``clock`` is the wall clock of idle
    times (tests move it). Construction does no I/O.
    """

    def __init__(
        self,
        config: KubernetesSandboxConfig | None = None,
        *,
        limits: SandboxConfig | None = None,
        data_root: Path | None = None,
        configuration: client.Configuration | None = None,
        clock: Callable[[], float] = time.time,
        skills: Callable[[], PodSkills | None] | None = None,
    ) -> None:
        limits = limits or SandboxConfig()
        config = config or limits.kubernetes
        self.config = config
        self.command_timeout = limits.command_timeout_seconds
        self.max_output_bytes = limits.max_output_bytes
        self.max_read_bytes = limits.max_read_bytes
        self.search_timeout = limits.search_timeout_seconds
        # Per-command rlimits in the pod; no process count (uids are shared across a
        # node's pods, so RLIMIT_NPROC would count other pods: use the kubelet's pid limit).
        self.command_limits = {
            "max_memory_bytes": limits.limits.max_memory_mb * 1024 * 1024,
            "max_cpu_seconds": limits.limits.max_cpu_seconds,
            "max_file_bytes": limits.limits.max_file_mb * 1024 * 1024,
            "max_open_files": limits.limits.max_open_files,
        }
        self.secret_env_patterns = tuple(limits.secret_env_patterns)
        self._configuration = configuration
        self._clock = clock
        # The enabled skills, copied into each pod at acquire (sandbox/skills.py);
        # not with an operator-mounted skills_volume, which is read-only.
        self._skills = None if config.skills_volume else skills
        # Two pools: a long command holds an exec thread for its whole run, and
        # must never starve the short API calls (acquire, release, reaper).
        self._executor = ThreadPoolExecutor(
            max_workers=config.api_threads, thread_name_prefix="k8s-sandbox-api"
        )
        self._exec_executor = ThreadPoolExecutor(
            max_workers=config.exec_threads, thread_name_prefix="k8s-sandbox-exec"
        )
        self._data_root = data_root
        self._core: client.CoreV1Api | None = None
        self._helper_code: bytes = b""
        self._spec_hash = spec_hash(config)
        self._entries: dict[str, _Entry] = {}
        self._sandboxes: dict[str, KubernetesSandbox] = {}
        self._pod_count = 0
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._reaper: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._replenishing = False
        self._closed = False
        self.last_reconcile: dict[str, list[str]] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> KubernetesSandboxProvider:
        return cls(
            settings.sandbox.kubernetes,
            limits=settings.sandbox,
            data_root=settings.data_root_path(),
            skills=pod_skills_source(settings) if settings.skills.enabled else None,
        )

    # --- public contract ------------------------------------------------------

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
                        "annotations": {ANN_LAST_ACTIVITY: format_time(now)},
                    }
                },
            )
            entry.last_touch_patch = now
        except _NotFound:
            entry.ready = False
            entry.verify = True
        except SandboxError as exc:
            logger.warning("could not mark sandbox pod %s idle: %s", entry.pod_name, exc)

    async def reset(self) -> None:
        """Forget every sandbox and stop background work; pods stay for the reaper."""
        await self._stop_background()
        self._entries.clear()
        self._sandboxes.clear()
        self._started = False

    async def aclose(self) -> None:
        """Stop background work and release the thread pool (shutdown)."""
        await self.reset()
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._exec_executor.shutdown(wait=False, cancel_futures=True)

    # --- lifecycle ------------------------------------------------------------

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

    async def _connect(self) -> None:
        if self._core is not None:
            return
        self._core, self._helper_code = await self._call(self._build_client)

    def _build_client(self) -> tuple[client.CoreV1Api, bytes]:
        configuration = self._configuration
        if configuration is None:
            configuration = client.Configuration()
            in_cluster = self.config.in_cluster
            if in_cluster is None:
                in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not (
                    self.config.kubeconfig
                )
            try:
                if in_cluster:
                    config.load_incluster_config(client_configuration=configuration)
                else:
                    config.load_kube_config(
                        config_file=self.config.kubeconfig,
                        context=self.config.context,
                        client_configuration=configuration,
                        persist_config=False,
                    )
            except (config.ConfigException, OSError, ValueError) as exc:
                raise SandboxError(
                    f"cannot load the Kubernetes client configuration: {exc}"
                ) from exc
            self._configuration = configuration
        return client.CoreV1Api(client.ApiClient(configuration)), _pod_agent.bundle()

    async def _stop_background(self) -> None:
        tasks = [t for t in (self._reaper, *self._background) if t is not None]
        self._reaper = None
        self._background.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- API calls (worker threads) -------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _call_exec(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._exec_executor, functools.partial(fn, *args, **kwargs)
        )

    @property
    def _api(self) -> client.CoreV1Api:
        if self._core is None:
            raise SandboxError("the Kubernetes sandbox provider is not started")
        return self._core

    def _timeout(self) -> float:
        return self.config.api_timeout_seconds

    async def _pod_call(
        self, action: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """One API call returning the decoded JSON body; errors become clear ones."""

        def run() -> Any:
            response = fn(*args, _preload_content=False, _request_timeout=self._timeout(), **kwargs)
            return json.loads(response.data or b"{}")

        try:
            return await self._call(run)
        except ApiException as exc:
            if exc.status == 404 and "namespace" not in _status_message(exc).lower():
                raise _NotFound() from None
            if exc.status == 409:
                raise _Conflict(_status_message(exc)) from None
            raise _api_error(exc, action, self.config.namespace) from None
        except OSError as exc:
            raise SandboxError(
                f"the Kubernetes API is unreachable ({exc}); try again shortly"
            ) from None
        except ValueError as exc:
            raise SandboxError(f"the Kubernetes API sent an unreadable reply ({exc})") from None

    async def _patch_pod(self, name: str, body: dict[str, Any]) -> PodView:
        raw = await self._pod_call(
            "update a sandbox pod",
            self._api.patch_namespaced_pod,
            name,
            self.config.namespace,
            body,
            _content_type="application/merge-patch+json",
        )
        return PodView(raw)

    async def _read_pod(self, name: str) -> PodView:
        raw = await self._pod_call(
            "read a sandbox pod", self._api.read_namespaced_pod, name, self.config.namespace
        )
        return PodView(raw)

    async def _list_pods(self) -> list[PodView]:
        raw = await self._pod_call(
            "list sandbox pods",
            self._api.list_namespaced_pod,
            self.config.namespace,
            label_selector=server_selector(self.config),
        )
        pods = [PodView(item) for item in raw.get("items") or []]
        # Filter here too: selectors are the server's job, but never trust it blindly.
        return [
            pod
            for pod in pods
            if pod.labels.get("app.kubernetes.io/name") == "deerflow-sandbox"
            and pod.labels.get("deerflow.dev/server") == self.config.server_id
        ]

    async def _delete_pod(self, name: str, resource_version: str | None = None) -> bool:
        """Delete a pod; with ``resource_version``, only if nobody changed it since.

        The reaper deletes on what it listed: the precondition makes the API
        refuse (409) if a server re-activated the pod in between.
        """
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if resource_version is not None:
            body["preconditions"] = {"resourceVersion": resource_version}
        try:
            await self._pod_call(
                "delete a sandbox pod",
                self._api.delete_namespaced_pod,
                name,
                self.config.namespace,
                body=body,
            )
        except (_NotFound, _Conflict):
            return False
        self._pod_count = max(0, self._pod_count - 1)
        return True

    # --- acquiring pods ----------------------------------------------------------

    def _activation(self, entry: _Entry) -> dict[str, Any]:
        return {
            "metadata": {
                "labels": {LABEL_STATE: STATE_ACTIVE, LABEL_SANDBOX: entry.key},
                "annotations": {
                    ANN_LAST_ACTIVITY: format_time(self._clock()),
                    ANN_USER_ID: entry.user_id,
                    ANN_THREAD_ID: entry.thread_id,
                },
            }
        }

    async def _ensure_pod(self, entry: _Entry, *, activate: bool) -> None:
        """Make ``entry`` point at a ready pod. Caller holds ``entry.lock``."""
        deadline = time.monotonic() + self.config.ready_timeout_seconds
        had_pod = entry.had_pod
        try:
            if activate:
                pod: PodView | None = await self._patch_pod(entry.pod_name, self._activation(entry))
            else:
                pod = await self._read_pod(entry.pod_name)
        except _NotFound:
            pod = None
        if pod is not None and (pod.dead or pod.terminating):
            logger.info("sandbox pod %s is %s; replacing it", pod.name, pod.phase)
            await self._delete_pod(pod.name)
            await self._wait_gone(pod.name, deadline)
            pod = None
        if pod is not None:
            if not pod.ready:
                pod = await self._wait_ready(pod.name, pod.resource_version, deadline)
                if not activate:
                    await self._patch_pod(pod.name, self._activation(entry))
            self._mark_ready(entry, pod.name, created=False, had_pod=had_pod)
            return
        if entry.pod_name != entry.sandbox_id:
            entry.pod_name = entry.sandbox_id  # the claimed warm pod is gone
        if self.config.warm_pool_size and await self._claim_warm(entry):
            self._mark_ready(entry, entry.pod_name, created=True, had_pod=had_pod)
            return
        await self._create_and_wait(entry, deadline)
        self._mark_ready(entry, entry.pod_name, created=True, had_pod=had_pod)

    def _mark_ready(self, entry: _Entry, name: str, *, created: bool, had_pod: bool) -> None:
        if created or name != entry.pod_name:
            entry.synced.clear()  # a new pod has none of the uploads
            entry.skills_digest = None
            entry.sync_pending = True
        entry.pod_name = name
        entry.ready = True
        entry.verify = False
        if created and had_pod:
            entry.recreated = True
        entry.had_pod = True

    async def _check_cap(self) -> None:
        if self._pod_count < self.config.max_pods:
            return
        # The local count may be stale (pods deleted elsewhere): recount before refusing.
        self._pod_count = len([p for p in await self._list_pods() if not p.terminating])
        if self._pod_count >= self.config.max_pods:
            raise SandboxError(
                f"the sandbox pod limit is reached ({self.config.max_pods} live pods in "
                f"namespace {self.config.namespace!r}); try again when other threads go idle"
            )

    async def _create_and_wait(self, entry: _Entry, deadline: float) -> None:
        await self._check_cap()
        pvc_name = None
        if self.config.workspace.type == "pvc":
            pvc_name = await self._ensure_pvc(entry)
        manifest = pod_manifest(
            self.config,
            name=entry.sandbox_id,
            state=STATE_ACTIVE,
            now=self._clock(),
            key=entry.key,
            user_id=entry.user_id,
            thread_id=entry.thread_id,
            pvc_name=pvc_name,
        )
        for _attempt in range(2):
            try:
                created = PodView(
                    await self._pod_call(
                        "create a sandbox pod",
                        self._api.create_namespaced_pod,
                        self.config.namespace,
                        manifest,
                    )
                )
            except _Conflict:
                # Another server (or an earlier run) created it: reuse it.
                try:
                    existing = await self._patch_pod(entry.sandbox_id, self._activation(entry))
                except _NotFound:
                    continue
                if existing.dead or existing.terminating:
                    await self._delete_pod(existing.name)
                    await self._wait_gone(existing.name, deadline)
                    continue
                pod = existing
                if not pod.ready:
                    pod = await self._wait_ready(pod.name, pod.resource_version, deadline)
                entry.pod_name = pod.name
                return
            self._pod_count += 1
            if created.ready:
                entry.pod_name = created.name
                return
            pod = await self._wait_ready(created.name, created.resource_version, deadline)
            entry.pod_name = pod.name
            return
        raise SandboxError(f"could not create sandbox pod {entry.sandbox_id}: it kept conflicting")

    async def _ensure_pvc(self, entry: _Entry) -> str:
        name = f"{entry.sandbox_id}-data"
        manifest = pvc_manifest(
            self.config, name=name, key=entry.key, user_id=entry.user_id, thread_id=entry.thread_id
        )
        with contextlib.suppress(_Conflict):
            await self._pod_call(
                "create a workspace volume claim",
                self._api.create_namespaced_persistent_volume_claim,
                self.config.namespace,
                manifest,
            )
        return name

    async def _wait_ready(
        self, name: str, resource_version: str | None, deadline: float
    ) -> PodView:
        """Watch the pod until it is ready, fails, vanishes or the deadline passes."""
        if deadline - time.monotonic() <= 0:
            raise self._not_ready_error(name, None)
        outcome, pod = await self._watch(name, resource_version, deadline)
        if outcome == "ready" and pod is not None:
            return pod
        if outcome == "fatal" and pod is not None:
            await self._delete_pod(name)
            raise SandboxError(
                f"sandbox pod {name} cannot start ({pod.fatal_reason()}); check "
                "sandbox.kubernetes.image and the pod settings"
            )
        if outcome == "deleted":
            raise SandboxError(f"sandbox pod {name} was deleted while starting; try again")
        raise self._not_ready_error(name, pod)

    async def _watch(
        self,
        name: str,
        resource_version: str | None,
        deadline: float,
        *,
        until_gone: bool = False,
    ) -> tuple[str, PodView | None]:
        """Run the blocking watch in a worker thread; stop it from here on timeout or cancel."""
        holder: dict[str, Any] = {}
        remaining = max(0.0, deadline - time.monotonic())
        future = asyncio.ensure_future(
            self._call(self._watch_pod, name, resource_version, deadline, holder, until_gone)
        )
        try:
            return await asyncio.wait_for(asyncio.shield(future), remaining + 1.0)
        except TimeoutError:
            holder["stopped"] = True
            stopper = holder.get("watch")
            if stopper is not None:
                stopper.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(future, 5.0)
            return "timeout", holder.get("last")
        except asyncio.CancelledError:
            holder["stopped"] = True
            stopper = holder.get("watch")
            if stopper is not None:
                stopper.stop()
            raise
        except ApiException as exc:
            raise _api_error(exc, "watch a sandbox pod", self.config.namespace) from None
        except OSError as exc:
            raise SandboxError(f"the watch on sandbox pod {name} failed ({exc})") from None

    def _not_ready_error(self, name: str, pod: PodView | None) -> SandboxError:
        reason = pod.pending_reason() if pod is not None else "no status yet"
        self._spawn(self._mark_idle_quietly(name), "k8s-sandbox-mark-idle")
        return SandboxError(
            f"sandbox pod {name} was not ready within "
            f"{self.config.ready_timeout_seconds:g}s ({reason})"
        )

    async def _mark_idle_quietly(self, name: str) -> None:
        with contextlib.suppress(Exception):
            await self._patch_pod(name, {"metadata": {"labels": {LABEL_STATE: STATE_IDLE}}})

    def _watch_pod(
        self,
        name: str,
        resource_version: str | None,
        deadline: float,
        holder: dict[str, Any],
        until_gone: bool = False,
    ) -> tuple[str, PodView | None]:
        """Blocking watch (worker thread). Returns (outcome, last pod seen).

        Outcomes: ``ready``, ``fatal`` (cannot start), ``deleted``, ``timeout``.
        With ``until_gone`` only the deletion ends it.
        """
        last: PodView | None = None
        for _attempt in range(3):
            if holder.get("stopped"):
                break
            w = watch.Watch()
            holder["watch"] = w
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            kwargs: dict[str, Any] = {
                "field_selector": f"metadata.name={name}",
                "timeout_seconds": int(remaining) + 1,
                "_request_timeout": remaining,
            }
            if resource_version:
                kwargs["resource_version"] = resource_version
            try:
                for event in w.stream(
                    self._api.list_namespaced_pod, self.config.namespace, **kwargs
                ):
                    raw = event.get("raw_object")
                    if not isinstance(raw, dict):
                        continue
                    pod = PodView(raw)
                    if pod.name != name:
                        continue  # selectors are the server's job, but check anyway
                    last = holder["last"] = pod
                    if event.get("type") == "DELETED":
                        return "deleted", pod
                    if until_gone:
                        continue
                    if pod.ready:
                        return "ready", pod
                    if pod.fatal_reason() is not None:
                        return "fatal", pod
                    if time.monotonic() > deadline:
                        return "timeout", last
            except ApiException as exc:
                if exc.status == 410:
                    resource_version = None  # too old: watch from now on
                    continue
                if holder.get("stopped") or time.monotonic() >= deadline:
                    break
                raise
            except Exception as exc:
                if holder.get("stopped") or time.monotonic() >= deadline:
                    break
                raise OSError(f"{type(exc).__name__}: {exc}") from exc
            finally:
                w.stop()
            break
        return "timeout", last

    async def _wait_gone(self, name: str, deadline: float) -> None:
        """Wait (with a watch) until a deleted pod is really gone, so its name is free."""
        try:
            pod = await self._read_pod(name)
        except _NotFound:
            return
        outcome, _pod = await self._watch(name, pod.resource_version, deadline, until_gone=True)
        if outcome != "deleted":
            raise SandboxError(f"sandbox pod {name} did not go away in time; try again")

    # --- warm pool --------------------------------------------------------------

    async def _claim_warm(self, entry: _Entry) -> bool:
        """Claim a ready warm pod atomically (a patch conditioned on its resourceVersion)."""
        pods = await self._list_pods()
        for pod in pods:
            if pod.key == entry.key and pod.ready and pod.name != entry.sandbox_id:
                entry.pod_name = pod.name  # another server already claimed one for this thread
                await self._patch_pod(pod.name, self._activation(entry))
                return True
        candidates = sorted(
            (
                p
                for p in pods
                if p.state == STATE_WARM
                and p.ready
                and p.annotations.get("deerflow.dev/spec-hash") == self._spec_hash
            ),
            key=lambda p: p.created or 0.0,
        )
        for pod in candidates:
            body = self._activation(entry)
            body["metadata"]["resourceVersion"] = pod.resource_version
            try:
                await self._patch_pod(pod.name, body)
            except (_Conflict, _NotFound):
                continue
            entry.pod_name = pod.name
            self._schedule_replenish()
            return True
        self._schedule_replenish()
        return False

    def _schedule_replenish(self) -> None:
        if self.config.warm_pool_size and not self._replenishing and self._started:
            self._spawn(self._replenish(), "k8s-sandbox-replenish")

    async def _replenish(self, pods: list[PodView] | None = None) -> int:
        """Create warm pods up to the pool size (within the pod cap); returns how many."""
        if self._replenishing:
            return 0
        self._replenishing = True
        try:
            if pods is None:
                pods = await self._list_pods()
            live = [p for p in pods if not p.terminating and not p.dead]
            warm = [p for p in live if p.state == STATE_WARM]
            self._pod_count = len(live)
            missing = min(self.config.warm_pool_size - len(warm), self.config.max_pods - len(live))
            created = 0
            for _ in range(max(0, missing)):
                name = warm_pod_name(secrets.token_hex(6))
                manifest = pod_manifest(self.config, name=name, state=STATE_WARM, now=self._clock())
                try:
                    await self._pod_call(
                        "create a warm sandbox pod",
                        self._api.create_namespaced_pod,
                        self.config.namespace,
                        manifest,
                    )
                except (SandboxError, _Conflict) as exc:
                    logger.warning("could not create a warm sandbox pod: %s", exc)
                    break
                self._pod_count += 1
                created += 1
            return created
        finally:
            self._replenishing = False

    # --- reaping and reconciliation ---------------------------------------------

    async def _reaper_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.reaper_interval_seconds)
            try:
                await self.reap()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the reaper must survive API hiccups
                logger.warning("sandbox reaper pass failed: %s", exc)

    async def reap(self) -> list[str]:
        """One reaper pass: delete idle, stale and dead pods; top up the warm pool."""
        now = self._clock()
        pods = await self._list_pods()
        held = {e.pod_name for e in self._entries.values() if e.refcount > 0}
        deleted: list[str] = []
        for pod in pods:
            if pod.terminating or pod.name in held:
                continue
            if self._reapable(pod, now) and await self._delete_pod(pod.name, pod.resource_version):
                deleted.append(pod.name)
        self._forget(deleted)
        remaining = [p for p in pods if p.name not in deleted]
        if self.config.warm_pool_size:
            await self._replenish(remaining)
        else:
            self._pod_count = len([p for p in remaining if not p.terminating])
        if deleted:
            logger.info("sandbox reaper deleted %d pod(s): %s", len(deleted), ", ".join(deleted))
        return deleted

    def _reapable(self, pod: PodView, now: float) -> bool:
        if pod.dead:
            return True
        if pod.state == STATE_WARM:
            return pod.annotations.get("deerflow.dev/spec-hash") != self._spec_hash
        last = pod.last_activity or pod.created
        if last is None:
            return False
        idle_for = now - last
        if pod.state == STATE_ACTIVE:
            return idle_for > max(
                self.config.stale_active_seconds, self.config.idle_timeout_seconds
            )
        return idle_for > self.config.idle_timeout_seconds

    def _forget(self, names: list[str]) -> None:
        if not names:
            return
        gone = set(names)
        for sandbox_id, entry in list(self._entries.items()):
            if entry.pod_name in gone:
                entry.ready = False
                entry.verify = True
                if entry.refcount == 0:
                    self._entries.pop(sandbox_id, None)
                    self._sandboxes.pop(sandbox_id, None)

    async def reconcile(self) -> dict[str, list[str]]:
        """Start-up pass over the pods this deployment owns.

        Dead pods and warm pods of another pod template are deleted; pods left
        'active' by a previous server process are marked idle so the reaper's
        idle clock applies to them; claimed warm pods are remembered so their
        threads find them again.
        """
        await self._connect()
        pods = await self._list_pods()
        report: dict[str, list[str]] = {"deleted": [], "idled": [], "adopted": []}
        held = {e.pod_name for e in self._entries.values() if e.refcount > 0}
        for pod in pods:
            if pod.terminating or pod.name in held:
                continue
            if pod.dead or (
                pod.state == STATE_WARM
                and pod.annotations.get("deerflow.dev/spec-hash") != self._spec_hash
            ):
                if await self._delete_pod(pod.name, pod.resource_version):
                    report["deleted"].append(pod.name)
                continue
            if pod.state == STATE_ACTIVE:
                with contextlib.suppress(_NotFound):
                    await self._patch_pod(
                        pod.name, {"metadata": {"labels": {LABEL_STATE: STATE_IDLE}}}
                    )
                    report["idled"].append(pod.name)
            key = pod.key
            user_id = pod.annotations.get(ANN_USER_ID)
            thread_id = pod.annotations.get(ANN_THREAD_ID)
            if key and user_id and thread_id and pod.name != sandbox_name(key):
                sandbox_id = sandbox_name(key)
                if sandbox_id not in self._entries:
                    self._entries[sandbox_id] = _Entry(
                        key=key,
                        sandbox_id=sandbox_id,
                        user_id=user_id,
                        thread_id=thread_id,
                        pod_name=pod.name,
                        had_pod=True,
                    )
                    report["adopted"].append(pod.name)
        self._pod_count = len(
            [p for p in pods if not p.terminating and p.name not in report["deleted"]]
        )
        for kind, names in report.items():
            if names:
                logger.info("sandbox reconciliation %s: %s", kind, ", ".join(names))
        return report

    # --- operations --------------------------------------------------------------

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
