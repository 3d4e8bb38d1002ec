"""Sandbox pod manifests: locked down by default, overridable, valid, stably named."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from runtime.config import (
    PROJECT_ROOT,
    ConfigError,
    KubernetesSandboxConfig,
    Settings,
    load_settings,
)
from sandbox._k8s_pods import (
    PodView,
    pod_manifest,
    pvc_manifest,
    sandbox_key,
    sandbox_name,
    spec_hash,
    warm_pod_name,
)
from sandbox.kubernetes import KubernetesSandboxProvider

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _pod(config: KubernetesSandboxConfig | None = None, **kwargs: Any) -> dict[str, Any]:
    config = config or KubernetesSandboxConfig()
    key = sandbox_key(config.server_id, "alice", "t1")
    return pod_manifest(
        config,
        name=sandbox_name(key),
        state="active",
        now=1_800_000_000.0,
        key=key,
        user_id="alice",
        thread_id="t1",
        **kwargs,
    )


def test_default_pod_is_locked_down() -> None:
    pod = _pod()
    kubernetes_validate.validate(pod, "1.35", strict=True)
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert set(container["resources"]["requests"]) == {"cpu", "memory", "ephemeral-storage"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory", "ephemeral-storage"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts == {"/mnt/user-data": "user-data", "/tmp": "tmp", "/mnt/skills": "skills"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["user-data"]["emptyDir"] == {"sizeLimit": "1Gi"}
    # The provider copies the enabled skills in at acquire (sandbox/skills.py).
    assert volumes["skills"]["emptyDir"] == {"sizeLimit": "64Mi"}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": "256Mi"}
    for absent in (
        "runtimeClassName",
        "nodeSelector",
        "tolerations",
        "imagePullSecrets",
        "serviceAccountName",
    ):
        assert absent not in spec


def test_overrides_reach_the_pod() -> None:
    config = KubernetesSandboxConfig.model_validate(
        {
            "image": "registry.example/sandbox:1.2",
            "runtime_class_name": "gvisor",
            "priority_class_name": "sandbox-low",
            "node_selector": {"pool": "sandboxes"},
            "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
            "image_pull_secrets": ["regcred"],
            "service_account_name": "sandbox-runner",
            "skills_volume": {"configMap": {"name": "skills"}},
            "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2", "memory": "2Gi"}},
            "security": {
                "run_as_user": 2000,
                "seccomp_profile": "Localhost",
                "seccomp_localhost_profile": "p.json",
            },
            "pod_labels": {"team": "ai", "deerflow.dev/state": "forged"},
        }
    )
    pod = _pod(config)
    kubernetes_validate.validate(pod, "1.35", strict=True)
    spec = pod["spec"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["priorityClassName"] == "sandbox-low"
    assert spec["nodeSelector"] == {"pool": "sandboxes"}
    assert spec["tolerations"][0]["key"] == "sandbox"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["serviceAccountName"] == "sandbox-runner"
    assert spec["containers"][0]["image"] == "registry.example/sandbox:1.2"
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "500m"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    }
    assert spec["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "p.json",
    }
    assert {"mountPath": "/mnt/skills", "name": "skills", "readOnly": True} in spec["containers"][
        0
    ]["volumeMounts"]
    labels = pod["metadata"]["labels"]
    assert labels["team"] == "ai" and labels["deerflow.dev/state"] == "active"  # ours win
    assert spec_hash(config) != spec_hash(KubernetesSandboxConfig())


def test_pvc_workspace() -> None:
    config = KubernetesSandboxConfig.model_validate(
        {"workspace": {"type": "pvc", "size_limit": "5Gi", "storage_class": "ssd"}}
    )
    pod = _pod(config, pvc_name="claim-1")
    kubernetes_validate.validate(pod, "1.35", strict=True)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "user-data")
    assert volume["persistentVolumeClaim"] == {"claimName": "claim-1"}
    claim = pvc_manifest(config, name="claim-1", key="k", user_id="u", thread_id="t")
    kubernetes_validate.validate(claim, "1.35", strict=True)
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["spec"]["storageClassName"] == "ssd"
    with pytest.raises(ValueError, match="claim name"):
        _pod(config)


def test_names_are_stable_distinct_dns_labels() -> None:
    a = sandbox_name(sandbox_key("deerflow", "alice", "t1"))
    assert a == sandbox_name(sandbox_key("deerflow", "alice", "t1"))
    others = {
        sandbox_name(sandbox_key("deerflow", "alice", "t2")),
        sandbox_name(sandbox_key("deerflow", "bob", "t1")),
        sandbox_name(sandbox_key("other", "alice", "t1")),
        sandbox_name(sandbox_key("deerflow", "alice\x00", "t1")),
    }
    assert a not in others and len(others) == 4
    for name in [a, *others, warm_pod_name("0123456789ab")]:
        assert DNS_LABEL.match(name) and len(name) <= 63


def test_pod_view_readiness_and_failures() -> None:
    ready = PodView(
        {
            "metadata": {"name": "p"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    assert ready.ready and not ready.dead
    terminating = PodView(
        {**ready.raw, "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    )
    assert not terminating.ready and terminating.terminating
    evicted = PodView(
        {"metadata": {}, "status": {"phase": "Failed", "reason": "Evicted", "message": "low disk"}}
    )
    assert evicted.dead and evicted.fatal_reason() == "Evicted: low disk"
    pulling = PodView(
        {
            "metadata": {},
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}}
                ],
            },
        }
    )
    assert pulling.fatal_reason() is None  # may still recover: wait, but say why
    assert pulling.pending_reason() == "ImagePullBackOff: back-off"
    unschedulable = PodView(
        {
            "metadata": {},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes",
                    }
                ],
            },
        }
    )
    assert unschedulable.pending_reason() == "Unschedulable: 0/3 nodes"


def test_config_section_validation(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().sandbox.kubernetes.namespace == "deerflow-sandbox"
    bad = tmp_path / "bad.yaml"
    bad.write_text("sandbox:\n  kubernetes:\n    warm_pool_size: 2\n    workspace: {type: pvc}\n")
    with pytest.raises(ConfigError, match="warm_pool_size must be 0"):
        load_settings(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("sandbox:\n  kubernetes:\n    namespce: x\n")
    with pytest.raises(ConfigError, match=r"sandbox.kubernetes.namespce: unknown key"):
        load_settings(typo)
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n")
    monkeypatch.setenv("DEERFLOW_K8S_NAMESPACE", "agents")
    monkeypatch.setenv("DEERFLOW_K8S_IMAGE", "img:1")
    settings = load_settings(empty)
    assert settings.sandbox.kubernetes.namespace == "agents"
    assert settings.sandbox.kubernetes.image == "img:1"


def _keys(model: type[BaseModel]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        nested = (
            annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel)
            else None
        )
        tree[name] = _keys(nested) if nested else None
    return tree


def _shape(value: Any, model: dict[str, Any]) -> dict[str, Any]:
    return {k: (_shape(value[k], sub) if sub else None) for k, sub in model.items() if k in value}


def test_config_example_documents_every_key_with_its_default() -> None:
    example = yaml.safe_load((PROJECT_ROOT / "config.example.yaml").read_text())["sandbox"][
        "kubernetes"
    ]
    tree = _keys(KubernetesSandboxConfig)
    assert _shape(example, tree) == tree  # every key, nested ones too
    assert KubernetesSandboxConfig.model_validate(example) == KubernetesSandboxConfig()


def test_from_settings_uses_the_shared_limits_and_does_no_io() -> None:
    settings = Settings.model_validate(
        {
            "data_root": "/srv/deerflow",
            "sandbox": {
                "use": "sandbox.kubernetes:KubernetesSandboxProvider",
                "command_timeout_seconds": 42,
                "max_output_bytes": 4096,
                "secret_env_patterns": ["*INTERNAL*"],
                "kubernetes": {"namespace": "agents", "kubeconfig": "/nonexistent/kubeconfig"},
            },
        }
    )
    provider = KubernetesSandboxProvider.from_settings(settings)
    assert provider.config.namespace == "agents"
    assert provider.command_timeout == 42 and provider.max_output_bytes == 4096
    env = provider.command_env({"MY_INTERNAL_URL": "x", "VISIBLE": "y"})
    assert "MY_INTERNAL_URL" not in env and env["VISIBLE"] == "y"
    assert env["PWD"] == "/mnt/user-data/workspace"
