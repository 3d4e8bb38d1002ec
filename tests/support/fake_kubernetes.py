"""A fake Kubernetes cluster for the Kubernetes sandbox provider's tests and benchmark.

The API side is ``kmock``'s in-process emulator (pods create/get/list/patch/
delete/watch), extended with what the provider relies on and kmock leaves out:
resource versions with optimistic-concurrency conflicts, label and field
selectors, bearer-token checks, a "kubelet" that marks pods Ready (or fails
them), and injected faults. The exec side is a websocket endpoint speaking the
v5 and v4 channel protocols that really runs the command, in a private mount
namespace where the pod's own directories are mounted at ``/mnt/user-data``,
``/mnt/skills`` and ``/tmp``: so the real client code, HTTP and websocket, is
exercised end to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import json
import re
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web
import attrs
import kmock
import yaml
from kmock._internal import rendering  # the emulator's request type (pinned kmock range)

from tests.support.server import server_blocking_detector_paused

__all__ = [
    "V4",
    "V5",
    "FakeKubernetes",
    "fake_cluster",
    "kubernetes_provider",
    "namespaces_supported",
]

V4 = "v4.channel.k8s.io"
V5 = "v5.channel.k8s.io"
TOKEN = "fake-cluster-token"

_EXEC_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec$")

# Runs as the exec'd process in a private mount namespace: the pod's
# directories appear where a real pod mounts its volumes.
_MOUNT_SCRIPT = """
root="$1"; shift
mount -t tmpfs fake-pod /mnt &&
mkdir -p /mnt/user-data /mnt/skills &&
mount --bind "$root/user-data" /mnt/user-data &&
mount --bind "$root/skills" /mnt/skills &&
mount --bind "$root/tmp" /tmp || { echo "fake kubelet: mount failed" >&2; exit 126; }
cd / && exec "$@"
"""


def namespaces_supported() -> str | None:
    """None if this machine can run the fake exec endpoint, else the reason."""
    if shutil.which("unshare") is None:
        return "the fake exec endpoint needs util-linux 'unshare'"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return "the fake exec endpoint needs mount namespaces (root or user namespaces)"
    return None


@dataclass
class _Fault:
    action: str
    status: int
    message: str
    reason: str
    name: str | None
    times: int


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _selector_matches(selector: str | None, labels: dict[str, Any]) -> bool:
    """Equality-based label selectors (``a=b,c!=d,e,!f``)."""
    if not selector:
        return True
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "==" in term or "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field_value(selector: str | None, key: str) -> str | None:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        name, _, value = term.partition("=")
        if name == key:
            return value.lstrip("=")
    return None


def _fields_match(selector: str | None, obj: dict[str, Any]) -> bool:
    if not selector:
        return True
    meta = obj.get("metadata") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.partition("=")
        value = value.lstrip("=")
        field = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace")}
        if key not in field:
            raise kmock.KubernetesError(status=400, reason="BadRequest", message=f"bad field {key}")
        if field[key] != value:
            return False
    return True


@attrs.define(kw_only=True)
class FakeKubernetes(kmock.KubernetesEmulator):
    """kmock's emulator plus what a sandbox provider needs from a cluster."""

    root: Path
    ready_delay: float | None = 0.01
    start_waiting: dict[str, str] | None = None
    exec_protocols: tuple[str, ...] = (V5, V4)
    token: str | None = TOKEN
    calls: Counter[str] = attrs.field(factory=Counter)
    exec_bytes_sent: int = 0
    exec_log: list[dict[str, Any]] = attrs.field(factory=list)
    _bin_dir: Path | None = None
    _faults: list[_Fault] = attrs.field(factory=list)
    _exec_faults: list[str] = attrs.field(factory=list)
    _rv: Any = attrs.field(factory=lambda: itertools.count(1000))
    _mutate: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    _tasks: set[asyncio.Task[Any]] = attrs.field(factory=set)
    _pods_resource: Any = None

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        info = kmock.ResourceInfo(
            kind="Pod",
            namespaced=True,
            verbs={"create", "get", "list", "watch", "patch", "delete"},
            subresources={"exec", "status"},
        )
        self.resources["v1/pods"] = info
        self.resources["v1/persistentvolumeclaims"] = kmock.ResourceInfo(
            kind="PersistentVolumeClaim", namespaced=True, verbs={"create", "get", "delete"}
        )
        self.resources["coordination.k8s.io/v1/leases"] = kmock.ResourceInfo(
            kind="Lease", namespaced=True, verbs={"create", "get", "patch", "update", "delete"}
        )
        self._pods_resource = kmock.resource("v1/pods")
        self.root.mkdir(parents=True, exist_ok=True)
        bin_dir = self.root / ".bin"
        bin_dir.mkdir(exist_ok=True)
        link = bin_dir / "python3"
        if not link.exists():
            link.symlink_to(sys.executable)
        self._bin_dir = bin_dir

    # --- test controls -----------------------------------------------------------

    def fail(
        self,
        action: str,
        status: int,
        message: str,
        *,
        reason: str = "Forbidden",
        name: str | None = None,
        times: int = 1,
    ) -> None:
        """The next ``times`` pod requests of ``action`` (create/fetch/list/watch/update/delete) fail."""
        self._faults.append(_Fault(action, status, message, reason, name, times))

    def fail_exec(self, kind: str, times: int = 1) -> None:
        """Exec faults: ``forbidden`` (403 at the handshake), ``drop`` (the stream
        breaks after the process started, without an exit status)."""
        self._exec_faults.extend([kind] * times)

    def count(self, action: str) -> int:
        return self.calls[action]

    def reset_counts(self) -> None:
        self.calls.clear()

    def pods(self, namespace: str) -> dict[str, dict[str, Any]]:
        found = {}
        for (resource, ns, name), obj in list(self.objects.items()):
            if resource == self._pods_resource and ns == namespace and not obj.deleted:
                found[name] = obj.raw
        return found

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods(namespace).get(name)

    def pod_dir(self, namespace: str, name: str) -> Path:
        return self.root / namespace / name

    def kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        server = str(self.servers[0].url).rstrip("/")
        data = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": server}}],
            "users": [{"name": "fake", "user": {"token": self.token or "none"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        return path

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod as ``kubectl delete`` would (through the API)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        async with self.servers[0].client.delete(
            f"/api/v1/namespaces/{namespace}/pods/{name}", headers=headers
        ) as response:
            response.raise_for_status()
        self.calls["delete"] -= 1  # the test's own call is not the provider's

    async def evict(self, namespace: str, name: str) -> None:
        """The node evicted the pod: it stays, Failed, and its emptyDir is gone."""
        await self._set_status(
            namespace,
            name,
            {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: ephemeral-storage.",
                "conditions": [{"type": "Ready", "status": "False"}],
            },
        )
        await asyncio.to_thread(shutil.rmtree, self.pod_dir(namespace, name), True)

    async def set_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Patch a stored pod directly (as another writer would), bumping its version."""
        async with self._mutate:
            key = (self._pods_resource, namespace, name)
            patch = {
                **patch,
                "metadata": {**patch.get("metadata", {}), "resourceVersion": self._next_rv()},
            }
            self.objects[key].patch(patch)
            await self._buses[self._pods_resource].put(
                {"type": "MODIFIED", "object": self.objects[key].raw}
            )

    async def finish_termination(self, namespace: str, name: str) -> None:
        """A terminating pod's containers stopped: the object goes away (DELETED)."""
        async with self._mutate:
            key = (self._pods_resource, namespace, name)
            raw = self.objects[key].raw
            self.objects[key].delete()
            await self._buses[self._pods_resource].put({"type": "DELETED", "object": raw})

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- request handling ----------------------------------------------------------

    def _next_rv(self) -> str:
        return str(next(self._rv))

    def _authorized(self, headers: Any) -> bool:
        return self.token is None or headers.get("Authorization") == f"Bearer {self.token}"

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        match = _EXEC_PATH.match(raw_request.path)
        if match and raw_request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._serve_exec(raw_request, match.group(1), match.group(2))
        return await super().__call__(raw_request)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        # kmock matches reactions by scanning its whole request history, which
        # makes every request slower than the last; this fake counts calls
        # itself (``calls``), so it keeps only the request being served.
        del self._requests[:-1]
        if not self._authorized(request.headers):
            raise kmock.KubernetesError(status=401, reason="Unauthorized", message="Unauthorized")
        action = (
            request.action.value if request.action is not None else str(request.method)
        ).lower()
        plural = getattr(request.resource, "plural", None)
        if plural == "persistentvolumeclaims":
            self.calls[f"pvc-{action}"] += 1
        if plural == "leases":
            self.calls[f"lease-{action}"] += 1
            async with self._mutate:
                return await self._lease(request, action)
        if plural != "pods":
            async with self._mutate:
                return await super()._handle(request)
        self.calls[action] += 1
        for fault in self._faults:
            if fault.times > 0 and fault.action == action and fault.name in (None, request.name):
                fault.times -= 1
                raise kmock.KubernetesError(
                    status=fault.status, reason=fault.reason, message=fault.message
                )
        if action in ("list", "watch", "fetch"):
            return await super()._handle(request)
        async with self._mutate:
            return await self._mutating(request, action)

    async def _lease(self, request: rendering.Request, action: str) -> aiohttp.web.StreamResponse:
        """Leases with resource versions: a conditioned update of a changed one is a 409."""
        if action == "create" and isinstance(request.data, dict):
            request.data.setdefault("metadata", {})["resourceVersion"] = self._next_rv()
        elif action == "update" and isinstance(request.data, dict):
            current = self.lease(request.namespace or "default", request.name or "")
            if current is None:
                raise kmock.KubernetesObjectNotFoundError()
            meta = request.data.setdefault("metadata", {})
            wanted = meta.get("resourceVersion")
            if wanted is not None and wanted != current["metadata"].get("resourceVersion"):
                raise kmock.KubernetesError(
                    status=409, reason="Conflict", message="the object has been modified"
                )
            meta["resourceVersion"] = self._next_rv()
        return await super()._handle(request)

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        for (resource, ns, key), obj in list(self.objects.items()):
            if (
                getattr(resource, "plural", None) == "leases"
                and ns == namespace
                and key == name
                and not obj.deleted
            ):
                return obj.raw
        return None

    async def _mutating(
        self, request: rendering.Request, action: str
    ) -> aiohttp.web.StreamResponse:
        namespace = request.namespace or "default"
        if action == "create":
            body = request.data
            if not isinstance(body, dict) or body.get("kind") != "Pod":
                raise kmock.KubernetesError(status=400, reason="BadRequest", message="not a Pod")
            meta = body.setdefault("metadata", {})
            meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta["resourceVersion"] = self._next_rv()
            body["status"] = {"phase": "Pending"}
            response = await super()._handle(request)
            if response.status < 300:
                self._spawn(self._kubelet(namespace, meta["name"], meta["uid"]))
            return response
        if action == "update":
            content_type = request.headers.get("Content-Type", "")
            if "patch" not in content_type or (
                "json-patch" in content_type and not isinstance(request.data, list)
            ):
                raise kmock.KubernetesError(
                    status=415, reason="UnsupportedMediaType", message=content_type
                )
            current = self.pod(namespace, request.name) if namespace and request.name else None
            if current is None:
                raise kmock.KubernetesObjectNotFoundError()
            meta = request.data.setdefault("metadata", {})
            wanted = meta.get("resourceVersion")
            if wanted is not None and wanted != current["metadata"].get("resourceVersion"):
                raise kmock.KubernetesError(
                    status=409,
                    reason="Conflict",
                    message=(
                        f'Operation cannot be fulfilled on pods "{request.name}": the object has '
                        "been modified; please apply your changes to the latest version and try again"
                    ),
                )
            meta["resourceVersion"] = self._next_rv()
            return await super()._handle(request)
        if action == "delete":
            current = self.pod(namespace, request.name) if request.name else None
            wanted = ((request.data or {}).get("preconditions") or {}).get("resourceVersion")
            if current is not None and wanted and wanted != current["metadata"]["resourceVersion"]:
                raise kmock.KubernetesError(
                    status=409,
                    reason="Conflict",
                    message=(
                        f'Operation cannot be fulfilled on pods "{request.name}": the '
                        "precondition's resourceVersion does not match"
                    ),
                )
            response = await super()._handle(request)
            if namespace and request.name:
                await asyncio.to_thread(shutil.rmtree, self.pod_dir(namespace, request.name), True)
            return response
        return await super()._handle(request)

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        result = await super()._serve_list(request)
        assert isinstance(result, dict)
        params = request.params or {}
        result["items"] = [
            item
            for item in result["items"]
            if _selector_matches(params.get("labelSelector"), item["metadata"].get("labels") or {})
            and _fields_match(params.get("fieldSelector"), item)
        ]
        result["metadata"] = {"resourceVersion": str(next(self._rv))}
        return result

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        """A watch as the API server serves it, with no window for lost events.

        kmock lists the existing objects first and only then marks its event bus,
        so an event published in between was never delivered, and it ignores
        ``resourceVersion``: a pod deleted before the watch arrived never sent
        DELETED, and a provider waiting for it hung until its deadline. Under
        load (the provider's watch starts in a worker thread) tests failed by
        timing. Here the bus is marked before the listing, and a watch with a
        ``resourceVersion`` whose field selector names a pod that is gone gets
        that pod's DELETED event, as a real API server replays it.
        """
        params = request.params or {}

        def wanted(obj: dict[str, Any]) -> bool:
            meta = obj.get("metadata") or {}
            return (
                (request.namespace is None or meta.get("namespace") == request.namespace)
                and (request.name is None or meta.get("name") == request.name)
                and _selector_matches(params.get("labelSelector"), meta.get("labels") or {})
                and _fields_match(params.get("fieldSelector"), obj)
            )

        yield b""  # headers out: the client sees the stream open
        assert request.resource is not None
        bus = self._buses[request.resource]
        marker = await bus.mark()
        try:
            async with self._lock:
                existing = [
                    obj.raw
                    for (resource, _ns, _name), obj in self.objects.items()
                    if resource == request.resource and not obj.deleted and wanted(obj.raw)
                ]
            for raw in existing:
                yield {"type": "ADDED", "object": raw}
            named = _field_value(params.get("fieldSelector"), "metadata.name")
            if params.get("resourceVersion") and named and not existing:
                gone = {"name": named, "namespace": request.namespace}
                gone["resourceVersion"] = self._next_rv()
                yield {"type": "DELETED", "object": {"kind": "Pod", "metadata": gone}}
            async for event in bus.stream(since=marker):
                if isinstance(event, dict) and not wanted(event.get("object") or {}):
                    continue
                yield event
        finally:
            await bus.unmark(marker)

    # --- the kubelet -----------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _kubelet(self, namespace: str, name: str, uid: str) -> None:
        if self.ready_delay is None:
            return  # never scheduled: stays Pending
        await asyncio.sleep(self.ready_delay)
        current = self.pod(namespace, name)
        if current is None or current["metadata"].get("uid") != uid:
            return
        container = current["spec"]["containers"][0]
        if self.start_waiting is not None:
            await self._set_status(
                namespace,
                name,
                {
                    "phase": "Pending",
                    "conditions": [
                        {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
                    ],
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "image": container["image"],
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"waiting": dict(self.start_waiting)},
                        }
                    ],
                },
            )
            return
        await asyncio.to_thread(self._make_pod_dirs, self.pod_dir(namespace, name))
        started = _now()
        await self._set_status(
            namespace,
            name,
            {
                "phase": "Running",
                "podIP": "10.0.0.10",
                "startTime": started,
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "fake://" + container["image"],
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": started}},
                    }
                ],
            },
        )

    @staticmethod
    def _make_pod_dirs(pod_root: Path) -> None:
        for sub in (
            "user-data/workspace",
            "user-data/uploads",
            "user-data/outputs",
            "tmp",
            "skills",
        ):
            (pod_root / sub).mkdir(parents=True, exist_ok=True)

    async def _set_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        async with self._mutate:
            key = (self._pods_resource, namespace, name)
            if key not in self.objects or self.objects[key].deleted:
                return
            self.objects[key].patch({"status": None})
            self.objects[key].patch(
                {"status": status, "metadata": {"resourceVersion": self._next_rv()}}
            )
            await self._buses[self._pods_resource].put(
                {"type": "MODIFIED", "object": self.objects[key].raw}
            )

    # --- pods/exec -----------------------------------------------------------------

    async def _serve_exec(
        self, raw: aiohttp.web.BaseRequest, namespace: str, name: str
    ) -> aiohttp.web.StreamResponse:
        self.calls["exec"] += 1
        if not self._authorized(raw.headers):
            return aiohttp.web.json_response(
                _status(401, "Unauthorized", "Unauthorized"), status=401
            )
        fault = self._exec_faults.pop(0) if self._exec_faults else None
        if fault == "forbidden":
            message = (
                f'pods "{name}" is forbidden: User "system:serviceaccount:deerflow:deerflow-api" '
                f'cannot create resource "pods/exec" in API group "" in the namespace "{namespace}"'
            )
            return aiohttp.web.json_response(_status(403, "Forbidden", message), status=403)
        pod = self.pod(namespace, name)
        if pod is None:
            return aiohttp.web.json_response(
                _status(404, "NotFound", f'pods "{name}" not found'), status=404
            )
        phase = (pod.get("status") or {}).get("phase")
        if phase != "Running":
            message = (
                f"cannot exec into a container in a completed pod; current phase is {phase}"
                if phase in ("Failed", "Succeeded")
                else f"pod {name} does not have a host assigned"
            )
            return aiohttp.web.json_response(_status(400, "BadRequest", message), status=400)
        container = raw.query.get("container")
        names = [c["name"] for c in pod["spec"]["containers"]]
        if container and container not in names:
            message = f"container {container} is not valid for pod {name}"
            return aiohttp.web.json_response(_status(400, "BadRequest", message), status=400)
        argv = raw.query.getall("command", [])
        use_stdin = raw.query.get("stdin") in ("true", "1")
        ws = aiohttp.web.WebSocketResponse(protocols=self.exec_protocols, max_msg_size=0)
        await ws.prepare(raw)
        self.exec_log.append({"pod": name, "argv": argv, "protocol": ws.ws_protocol})
        if ws.ws_protocol is None:
            await ws.close()
            return ws
        env = {
            "PATH": f"{self._bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "HOSTNAME": name,
        }
        process = await asyncio.create_subprocess_exec(
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            _MOUNT_SCRIPT,
            "fake-kubelet",
            str(self.pod_dir(namespace, name)),
            *argv,
            stdin=asyncio.subprocess.PIPE if use_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        if fault == "drop":
            await asyncio.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            if raw.transport is not None:
                raw.transport.abort()
            return ws
        v5 = ws.ws_protocol == V5

        async def pump_in() -> None:
            assert process.stdin is not None
            try:
                async for message in ws:
                    if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                        continue
                    data = (
                        message.data if isinstance(message.data, bytes) else message.data.encode()
                    )
                    if not data:
                        continue
                    if data[0] == 0:
                        process.stdin.write(data[1:])
                        await process.stdin.drain()
                    elif data[0] == 255 and v5 and data[1:2] == b"\x00":
                        process.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    process.stdin.close()

        async def pump_out(stream: asyncio.StreamReader, channel: int) -> None:
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    return
                self.exec_bytes_sent += len(chunk)
                await ws.send_bytes(bytes([channel]) + chunk)

        reader = asyncio.ensure_future(pump_in()) if use_stdin else None
        assert process.stdout is not None and process.stderr is not None
        await asyncio.gather(pump_out(process.stdout, 1), pump_out(process.stderr, 2))
        code = await process.wait()
        if code == 0:
            status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        else:
            status = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: exit status {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        return ws


@contextlib.asynccontextmanager
async def fake_cluster(root: Path, **options: Any) -> AsyncIterator[FakeKubernetes]:
    """Serve a ``FakeKubernetes`` on a free local port for the duration of the block.

    The fake does blocking I/O on the loop by design (it stands in for a remote
    cluster), so the in-process server's process-wide blocking detector is paused
    meanwhile; the provider's own code is checked by a module-scoped detector.
    """
    with server_blocking_detector_paused():
        fake = FakeKubernetes(root=root, **options)
        async with fake, kmock.Server(fake):
            try:
                yield fake
            finally:
                await fake.aclose()


@contextlib.asynccontextmanager
async def kubernetes_provider(
    root: Path,
    *,
    cluster: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    clock: Any = None,
    data_root: Path | None = None,
    skills: Any = None,
    **config: Any,
) -> AsyncIterator[tuple[Any, FakeKubernetes]]:
    """A ``KubernetesSandboxProvider`` wired to a fresh fake cluster through a kubeconfig.

    ``config`` entries are ``sandbox.kubernetes`` keys, ``limits`` entries
    ``sandbox`` keys (timeouts and caps), ``cluster`` entries ``FakeKubernetes``
    options. Yields (provider, fake).
    """
    from runtime.config import KubernetesSandboxConfig, SandboxConfig
    from sandbox.kubernetes import KubernetesSandboxProvider

    async with fake_cluster(root / "cluster", **(cluster or {})) as fake:
        namespace = config.setdefault("namespace", "deerflow-sandbox")
        kubeconfig = fake.kubeconfig(root / "kubeconfig", namespace=namespace)
        section = KubernetesSandboxConfig(kubeconfig=str(kubeconfig), **config)
        sandbox = SandboxConfig.model_validate(
            {"use": "sandbox.kubernetes:KubernetesSandboxProvider", **(limits or {})}
        )
        extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
        if skills is not None:  # a skills source (sandbox.skills.pod_skills_source)
            extra["skills"] = skills
        provider = KubernetesSandboxProvider(section, limits=sandbox, data_root=data_root, **extra)
        try:
            yield provider, fake
        finally:
            await provider.aclose()
