"""Kubernetes sandbox provider, part 1: shared state and the API calls.

The provider is split by responsibility: this base (client, thread pools,
pod API calls with clear errors), ``_k8s_maintenance`` (warm pool, reaper,
reconciliation), ``_k8s_lifecycle`` (making a thread's pod exist and be
ready) and ``_k8s_transfer`` (helper execs and upload copies). The public
class is ``sandbox.kubernetes.KubernetesSandboxProvider``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from runtime.config import KubernetesSandboxConfig, SandboxConfig
from sandbox import _pod_agent
from sandbox._k8s_pods import (
    ANN_HEARTBEAT,
    ANN_HOLDER,
    ANN_LAST_ACTIVITY,
    ANN_THREAD_ID,
    ANN_USER_ID,
    LABEL_SANDBOX,
    LABEL_STATE,
    STATE_ACTIVE,
    PodView,
    format_time,
    server_selector,
    spec_hash,
)
from sandbox.base import (
    Sandbox,
    SandboxError,
)
from sandbox.skills import PodSkills

logger = logging.getLogger("sandbox.kubernetes")

T = TypeVar("T")


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


class _ProviderBase:
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
        self._sandboxes: dict[str, Sandbox] = {}
        self._pod_count = 0
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._reaper: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._replenishing = False
        self._closed = False
        self.last_reconcile: dict[str, list[str]] = {}
        # Several server replicas share the namespace: each names itself in the
        # holder annotation of the pods it uses; one at a time holds the Lease.
        self.replica_id = config.replica_id or (
            f"{os.environ.get('HOSTNAME') or 'replica'}-{secrets.token_hex(4)}"
        )
        self.is_leader = False

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

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _call_exec(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._exec_executor, functools.partial(fn, *args, **kwargs)
        )

    @property
    def _coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self._api.api_client)

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

    def _activation(self, entry: _Entry) -> dict[str, Any]:
        return {
            "metadata": {
                "labels": {LABEL_STATE: STATE_ACTIVE, LABEL_SANDBOX: entry.key},
                "annotations": {
                    ANN_LAST_ACTIVITY: format_time(self._clock()),
                    ANN_HOLDER: self.replica_id,
                    ANN_HEARTBEAT: format_time(self._clock()),
                    ANN_USER_ID: entry.user_id,
                    ANN_THREAD_ID: entry.thread_id,
                },
            }
        }
