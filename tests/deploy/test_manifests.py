"""Kubernetes manifests: render, validate strictly, and hold the security policy."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.validate import (
    K8S_DIR,
    KUSTOMIZATIONS,
    ManifestError,
    load_documents,
    policy_violations,
    render,
    validate_documents,
)
from runtime.config import load_settings


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render(K8S_DIR / name) for name in KUSTOMIZATIONS}


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_kustomization_renders_and_validates_strictly(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    documents = rendered[name]
    assert documents
    validate_documents(documents, source=name)


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_policy_holds_on_every_container(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    assert policy_violations(rendered[name]) == []


def test_every_manifest_file_parses() -> None:
    files = sorted(p for p in K8S_DIR.rglob("*.yaml") if p.name != "config.yaml")
    assert len(files) >= 10
    for path in files:
        load_documents(path.read_text(), source=str(path))


def test_shipped_server_config_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap's config.yaml must load with the server's own loader.

    Mode jwt needs a key; the Deployment provides it from the deerflow-auth Secret.
    """
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_SECRET", "s" * 48)
    settings = load_settings(K8S_DIR / "base" / "settings" / "config.yaml")
    assert settings.auth.mode == "jwt"
    assert settings.sandbox.use == "sandbox.kubernetes:KubernetesSandboxProvider"


def _kinds(documents: list[dict[str, Any]]) -> set[str]:
    return {f"{d['kind']}/{d['metadata']['name']}" for d in documents}


def test_overlays_carry_what_the_deployment_needs(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    common = {
        "Deployment/deerflow-api",
        "Service/deerflow-api",
        "HorizontalPodAutoscaler/deerflow-api",
        "PodDisruptionBudget/deerflow-api",
        "Deployment/deerflow-redis",
        "Service/deerflow-redis",
        "Ingress/deerflow-api",
    }
    assert common <= _kinds(rendered["overlays/dev"])
    assert common <= _kinds(rendered["overlays/prod"])
    assert "StatefulSet/deerflow-postgres" in _kinds(rendered["overlays/dev"])
    assert "StatefulSet/deerflow-postgres" not in _kinds(rendered["overlays/prod"])
    config_maps = [d for d in rendered["overlays/prod"] if d["kind"] == "ConfigMap"]
    assert any("config.yaml" in (d.get("data") or {}) for d in config_maps)


def _container(documents: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    found = next(
        d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == deployment
    )
    container: dict[str, Any] = found["spec"]["template"]["spec"]["containers"][0]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item for item in container.get("env") or []}


def _config_env(documents: list[dict[str, Any]]) -> dict[str, str]:
    """The plain settings ConfigMap the server pods load with envFrom."""
    found = next(
        d
        for d in documents
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("deerflow-server-env")
    )
    data: dict[str, str] = found["data"]
    return data


def _api_container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(
        d
        for d in documents
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "deerflow-api"
    )
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_api_probes_jobs_and_secret_references(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    api = _api_container(rendered["overlays/prod"])
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert api[probe]["httpGet"]["path"] == "/ok"
    env = {item["name"]: item for item in api["env"]}
    # The API pods serve HTTP only; runs execute in the queue workers.
    assert int(env["N_JOBS_PER_WORKER"]["value"]) == 0
    queue = _container(rendered["overlays/prod"], "deerflow-queue")
    assert int(_env(queue)["N_JOBS_PER_WORKER"]["value"]) > 0
    for name in (
        "DATABASE_URI",
        "DEERFLOW_POSTGRES_URI",
        "LANGGRAPH_CLOUD_LICENSE_KEY",
        "LANGSMITH_API_KEY",
        "DEERFLOW_AUTH_JWT_SECRET",
        "OPENAI_API_KEY",
    ):
        assert "secretKeyRef" in env[name]["valueFrom"], name
    plain = _config_env(rendered["overlays/prod"])
    assert plain["DEERFLOW_CONFIG"] == "/etc/deerflow/config.yaml"
    assert api["image"].startswith("registry.example.com/deerflow-server@sha256:")


def test_no_secret_objects_are_committed() -> None:
    for path in K8S_DIR.rglob("*.yaml"):
        if path.name == "config.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict):
                assert document.get("kind") != "Secret", path


# --- the checks themselves fail on broken input -------------------------------


@pytest.fixture
def k8s_copy(tmp_path: Path) -> Path:
    target = tmp_path / "k8s"
    shutil.copytree(K8S_DIR, target)
    return target


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_schema_check_rejects_unknown_field(k8s_copy: Path) -> None:
    _edit(k8s_copy / "base" / "api-service.yaml", "  selector:", "  selectr:")
    documents = render(k8s_copy / "overlays" / "prod")
    with pytest.raises(ManifestError, match="Service/deerflow-api"):
        validate_documents(documents, source="broken")


def test_schema_check_rejects_wrong_type(k8s_copy: Path) -> None:
    _edit(
        k8s_copy / "base" / "api-deployment.yaml",
        "revisionHistoryLimit: 5",
        "revisionHistoryLimit: five",
    )
    with pytest.raises(ManifestError, match="revisionHistoryLimit"):
        validate_documents(render(k8s_copy / "base"), source="broken")


def test_render_rejects_broken_kustomization(k8s_copy: Path) -> None:
    _edit(k8s_copy / "overlays" / "dev" / "kustomization.yaml", "postgres.yaml", "missing.yaml")
    with pytest.raises(ManifestError, match="kustomize"):
        render(k8s_copy / "overlays" / "dev")


def test_policy_flags_escalation_missing_limits_and_secret_values(k8s_copy: Path) -> None:
    _edit(
        k8s_copy / "base" / "redis.yaml",
        "allowPrivilegeEscalation: false",
        "allowPrivilegeEscalation: true",
    )
    documents = render(k8s_copy / "base")
    api = _api_container(documents)
    del api["resources"]["limits"]
    api["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}
    documents.append(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "leak"}, "data": {"k": "dg=="}}
    )
    problems = policy_violations(documents)
    assert any("deerflow-redis" in p and "allowPrivilegeEscalation" in p for p in problems)
    assert any("container api: no cpu limit" in p for p in problems)
    assert any("container api: capabilities do not drop ALL" in p for p in problems)
    assert any("Secret/leak" in p for p in problems)


def test_invalid_yaml_is_reported() -> None:
    with pytest.raises(ManifestError, match="not valid YAML"):
        load_documents("kind: [unclosed", source="x")


@pytest.mark.parametrize("overlay", ["overlays/dev", "overlays/prod"])
def test_overlays_include_the_sandbox_namespace_and_rbac(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    placed = {
        (d["kind"], d["metadata"]["name"]): d["metadata"].get("namespace")
        for d in rendered[overlay]
    }
    assert ("Namespace", "deerflow-sandbox") in placed
    for kind in ("Role", "RoleBinding", "ResourceQuota", "LimitRange"):
        names = [n for (k, n), ns in placed.items() if k == kind and ns == "deerflow-sandbox"]
        assert names, f"{kind} not in the sandbox namespace"
    # Everything of the server stays in its own namespace.
    assert placed[("Deployment", "deerflow-api")] == "deerflow"
    if overlay == "overlays/dev":
        assert placed[("StatefulSet", "deerflow-postgres")] == "deerflow"
