"""Sandbox pod naming, labels and manifests (pure functions, no API calls).

Kept apart from the provider so the manifest can be validated offline against
the Kubernetes schemas, and so naming stays stable across server restarts: a
(user, thread) always maps to the same pod name and label.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import time
from typing import Any

from runtime.config import KubernetesSandboxConfig
from runtime.paths import VIRTUAL_SKILLS, VIRTUAL_USER_DATA, VIRTUAL_WORKSPACE

__all__ = [
    "ANN_HEARTBEAT",
    "ANN_HOLDER",
    "ANN_LAST_ACTIVITY",
    "ANN_SPEC_HASH",
    "ANN_THREAD_ID",
    "ANN_USER_ID",
    "APP_NAME",
    "CONTAINER_NAME",
    "LABEL_APP",
    "LABEL_MANAGED_BY",
    "LABEL_SANDBOX",
    "LABEL_SERVER",
    "LABEL_STATE",
    "MANAGED_BY",
    "PodView",
    "format_time",
    "parse_time",
    "pod_manifest",
    "pvc_manifest",
    "sandbox_key",
    "sandbox_name",
    "server_selector",
    "spec_hash",
    "warm_pod_name",
]

APP_NAME = "deerflow-sandbox"
MANAGED_BY = "deerflow-server"
CONTAINER_NAME = "sandbox"
NAME_PREFIX = "deerflow-sbx-"

LABEL_APP = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_SERVER = "deerflow.dev/server"
LABEL_STATE = "deerflow.dev/state"
LABEL_SANDBOX = "deerflow.dev/sandbox"

ANN_USER_ID = "deerflow.dev/user-id"
ANN_THREAD_ID = "deerflow.dev/thread-id"
ANN_LAST_ACTIVITY = "deerflow.dev/last-activity"
ANN_SPEC_HASH = "deerflow.dev/spec-hash"
# Which server replica uses the pod now, and when it last said so (any replica
# respects a fresh heartbeat: see the maintenance module).
ANN_HOLDER = "deerflow.dev/holder"
ANN_HEARTBEAT = "deerflow.dev/heartbeat"

STATE_ACTIVE = "active"
STATE_IDLE = "idle"
STATE_WARM = "warm"

# The pod's main process: create the user-data directories, then sleep until
# told to stop (a shell as PID 1 ignores SIGTERM unless it traps it).
_KEEPALIVE = (
    f"mkdir -p {VIRTUAL_USER_DATA}/workspace {VIRTUAL_USER_DATA}/uploads "
    f"{VIRTUAL_USER_DATA}/outputs && trap 'exit 0' TERM INT; "
    "while :; do sleep 3600 & wait $!; done"
)


def sandbox_key(server_id: str, user_id: str, thread_id: str) -> str:
    """A stable hash of (deployment, user, thread): a valid label value."""
    raw = f"{server_id}\x00{user_id}\x00{thread_id}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:32]


def sandbox_name(key: str) -> str:
    """The thread's pod name (and sandbox id): a DNS label, stable across restarts."""
    return NAME_PREFIX + key


def warm_pod_name(token: str) -> str:
    return f"{NAME_PREFIX}w-{token}"


def server_selector(config: KubernetesSandboxConfig) -> str:
    return f"{LABEL_APP}={APP_NAME},{LABEL_SERVER}={config.server_id}"


def format_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _security_context(config: KubernetesSandboxConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    sec = config.security
    seccomp: dict[str, Any] = {"type": sec.seccomp_profile}
    if sec.seccomp_profile == "Localhost" and sec.seccomp_localhost_profile:
        seccomp["localhostProfile"] = sec.seccomp_localhost_profile
    pod: dict[str, Any] = {
        "runAsNonRoot": sec.run_as_non_root,
        "runAsUser": sec.run_as_user,
        "runAsGroup": sec.run_as_group,
        "seccompProfile": seccomp,
    }
    if sec.fs_group is not None:
        pod["fsGroup"] = sec.fs_group
    capabilities: dict[str, Any] = {"drop": list(sec.drop_capabilities)}
    if sec.add_capabilities:
        capabilities["add"] = list(sec.add_capabilities)
    container: dict[str, Any] = {
        "allowPrivilegeEscalation": sec.allow_privilege_escalation,
        "readOnlyRootFilesystem": sec.read_only_root_filesystem,
        "runAsNonRoot": sec.run_as_non_root,
        "runAsUser": sec.run_as_user,
        "runAsGroup": sec.run_as_group,
        "capabilities": capabilities,
        "seccompProfile": seccomp,
    }
    return pod, container


def _pod_spec(config: KubernetesSandboxConfig, pvc_name: str | None) -> dict[str, Any]:
    pod_security, container_security = _security_context(config)
    if config.workspace.type == "pvc":
        if pvc_name is None:
            raise ValueError("a pvc workspace needs the claim name")
        user_data: dict[str, Any] = {
            "name": "user-data",
            "persistentVolumeClaim": {"claimName": pvc_name},
        }
    else:
        user_data = {"name": "user-data", "emptyDir": {"sizeLimit": config.workspace.size_limit}}
    volumes: list[dict[str, Any]] = [
        user_data,
        {"name": "tmp", "emptyDir": {"sizeLimit": config.tmp_size_limit}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "user-data", "mountPath": VIRTUAL_USER_DATA},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if config.skills_volume:
        volumes.append({"name": "skills", **config.skills_volume})
        mounts.append({"name": "skills", "mountPath": VIRTUAL_SKILLS, "readOnly": True})
    else:  # the provider copies the enabled skills in at acquire (sandbox/skills.py)
        volumes.append({"name": "skills", "emptyDir": {"sizeLimit": "64Mi"}})
        mounts.append({"name": "skills", "mountPath": VIRTUAL_SKILLS})
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": config.image,
        "imagePullPolicy": config.image_pull_policy,
        "command": ["/bin/sh", "-c", _KEEPALIVE],
        "workingDir": VIRTUAL_WORKSPACE,
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "TMPDIR", "value": "/tmp"},
        ],
        "resources": {
            "requests": dict(config.resources.requests),
            "limits": dict(config.resources.limits),
        },
        "securityContext": container_security,
        "volumeMounts": mounts,
        # Ready only once the user-data directories exist.
        "startupProbe": {
            "exec": {"command": ["/bin/sh", "-c", f"test -d {VIRTUAL_USER_DATA}/outputs"]},
            "periodSeconds": 1,
            "failureThreshold": 120,
        },
    }
    spec: dict[str, Any] = {
        "automountServiceAccountToken": config.security.automount_service_account_token,
        "enableServiceLinks": config.security.enable_service_links,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 5,
        "securityContext": pod_security,
        "containers": [container],
        "volumes": volumes,
    }
    if config.service_account_name:
        spec["serviceAccountName"] = config.service_account_name
    if config.runtime_class_name:
        spec["runtimeClassName"] = config.runtime_class_name
    if config.priority_class_name:
        spec["priorityClassName"] = config.priority_class_name
    if config.node_selector:
        spec["nodeSelector"] = dict(config.node_selector)
    if config.tolerations:
        spec["tolerations"] = [dict(t) for t in config.tolerations]
    if config.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in config.image_pull_secrets]
    return spec


def spec_hash(config: KubernetesSandboxConfig) -> str:
    """Fingerprint of the pod template: warm pods built from another config are not claimed."""
    spec = _pod_spec(config, "claim" if config.workspace.type == "pvc" else None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def pod_manifest(
    config: KubernetesSandboxConfig,
    *,
    name: str,
    state: str,
    now: float,
    key: str | None = None,
    user_id: str | None = None,
    thread_id: str | None = None,
    pvc_name: str | None = None,
) -> dict[str, Any]:
    """The sandbox pod: locked down by default, labelled so the server can find it."""
    labels = {**config.pod_labels}
    labels.update(
        {
            LABEL_APP: APP_NAME,
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_SERVER: config.server_id,
            LABEL_STATE: state,
        }
    )
    if key is not None:
        labels[LABEL_SANDBOX] = key
    annotations = {**config.pod_annotations}
    annotations.update({ANN_LAST_ACTIVITY: format_time(now), ANN_SPEC_HASH: spec_hash(config)})
    if user_id is not None:
        annotations[ANN_USER_ID] = user_id
    if thread_id is not None:
        annotations[ANN_THREAD_ID] = thread_id
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": config.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": _pod_spec(config, pvc_name),
    }


def pvc_manifest(
    config: KubernetesSandboxConfig, *, name: str, key: str, user_id: str, thread_id: str
) -> dict[str, Any]:
    """A per-thread workspace claim; it outlives the pod so a reaped thread keeps its files."""
    spec: dict[str, Any] = {
        "accessModes": list(config.workspace.access_modes),
        "resources": {"requests": {"storage": config.workspace.size_limit}},
    }
    if config.workspace.storage_class:
        spec["storageClassName"] = config.workspace.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": config.namespace,
            "labels": {
                LABEL_APP: APP_NAME,
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_SERVER: config.server_id,
                LABEL_SANDBOX: key,
            },
            "annotations": {ANN_USER_ID: user_id, ANN_THREAD_ID: thread_id},
        },
        "spec": spec,
    }


_FATAL_WAITING = frozenset(
    {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"}
)


class PodView:
    """Read-only helpers over a pod as the API returns it (a plain dict)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.metadata: dict[str, Any] = raw.get("metadata") or {}
        self.status: dict[str, Any] = raw.get("status") or {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def resource_version(self) -> str | None:
        value = self.metadata.get("resourceVersion")
        return str(value) if value is not None else None

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.metadata.get("labels") or {})

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.metadata.get("annotations") or {})

    @property
    def state(self) -> str | None:
        return self.labels.get(LABEL_STATE)

    @property
    def key(self) -> str | None:
        return self.labels.get(LABEL_SANDBOX)

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "Pending")

    @property
    def terminating(self) -> bool:
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def dead(self) -> bool:
        """Finished, failed or evicted: it will never run commands again."""
        return self.phase in {"Failed", "Succeeded"}

    @property
    def ready(self) -> bool:
        if self.terminating or self.phase != "Running":
            return False
        for condition in self.status.get("conditions") or []:
            if condition.get("type") == "Ready":
                return str(condition.get("status")) == "True"
        return False

    @property
    def last_activity(self) -> float | None:
        return parse_time(self.annotations.get(ANN_LAST_ACTIVITY))

    @property
    def holder(self) -> str | None:
        return self.annotations.get(ANN_HOLDER) or None

    @property
    def heartbeat(self) -> float | None:
        return parse_time(self.annotations.get(ANN_HEARTBEAT))

    @property
    def created(self) -> float | None:
        return parse_time(self.metadata.get("creationTimestamp"))

    def fatal_reason(self) -> str | None:
        """A start-up failure that waiting will not fix (bad image name, bad config)."""
        if self.dead:
            reason = self.status.get("reason") or self.phase
            message = self.status.get("message") or ""
            return f"{reason}: {message}".rstrip(": ")
        for waiting in self._waiting():
            if waiting.get("reason") in _FATAL_WAITING:
                return f"{waiting.get('reason')}: {waiting.get('message') or ''}".rstrip(": ")
        return None

    def pending_reason(self) -> str:
        """Why the pod is not ready yet, for the timeout error."""
        for waiting in self._waiting():
            if waiting.get("reason"):
                return f"{waiting['reason']}: {waiting.get('message') or ''}".rstrip(": ")
        for condition in self.status.get("conditions") or []:
            if str(condition.get("status")) == "False" and condition.get("reason"):
                return f"{condition['reason']}: {condition.get('message') or ''}".rstrip(": ")
        return f"phase {self.phase}"

    def _waiting(self) -> list[dict[str, Any]]:
        found = []
        for status in self.status.get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting")
            if waiting:
                found.append(waiting)
        return found
