"""Offline checks of the one-shot migration Job (``deploy/k8s/overlays/prod-migrate``).

An upgrade runs the Job (``python -m runtime.migrate``) and then applies the
prod overlay, whose pods only verify the tables (``database.setup: verify``).
These tests hold the two renders to that contract: the Job runs the release's
image with the API's ConfigMaps and Secret, applying it rolls nothing, and it
passes the same restricted-Pod-Security checks as every other workload.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.validate import K8S_DIR, policy_violations, render, validate_documents
from runtime.config import ENV_OVERRIDES, Settings

Docs = list[dict[str, Any]]


@pytest.fixture(scope="module")
def prod() -> Docs:
    return render(K8S_DIR / "overlays" / "prod")


@pytest.fixture(scope="module")
def migrate() -> Docs:
    return render(K8S_DIR / "overlays" / "prod-migrate")


def _one(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _job(docs: Docs) -> dict[str, Any]:
    return _one(docs, "Job", "deerflow-migrate")


def _job_pod(docs: Docs) -> dict[str, Any]:
    pod: dict[str, Any] = _job(docs)["spec"]["template"]["spec"]
    return pod


def _api_container(docs: Docs) -> dict[str, Any]:
    container: dict[str, Any] = _one(docs, "Deployment", "deerflow-api")["spec"]["template"][
        "spec"
    ]["containers"][0]
    return container


def _secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container.get("env", [])
        if "secretKeyRef" in (e.get("valueFrom") or {})
    }


def test_the_job_is_its_own_step_and_applying_it_rolls_nothing(prod: Docs, migrate: Docs) -> None:
    assert {d["kind"] for d in migrate} == {"ConfigMap", "Job", "NetworkPolicy"}
    # Not in the prod overlay: a Job's pod template is immutable, so a Job there
    # would make the next `kubectl apply -k overlays/prod` fail on a new digest.
    assert not [d for d in prod if d["kind"] == "Job"]
    validate_documents(migrate, source="overlays/prod-migrate")
    assert {d["metadata"]["namespace"] for d in migrate} == {"deerflow"}


def test_the_job_runs_the_migration_entry_point_in_the_pinned_release_image(
    prod: Docs, migrate: Docs
) -> None:
    (container,) = _job_pod(migrate)["containers"]
    assert container["command"] == ["python", "-m", "runtime.migrate"]
    assert importlib.util.find_spec("runtime.migrate") is not None
    assert container["image"] == _api_container(prod)["image"]
    assert "@sha256:" in container["image"]


def test_the_job_uses_the_apis_configmaps_and_postgres_secret(prod: Docs, migrate: Docs) -> None:
    (container,) = _job_pod(migrate)["containers"]
    api = _api_container(prod)
    assert container["envFrom"] == api["envFrom"]
    job_secrets = _secret_refs(container)
    api_secrets = _secret_refs(api)
    for name in ("DATABASE_URI", "DEERFLOW_POSTGRES_URI"):
        assert job_secrets[name] == api_secrets[name] == ("deerflow-postgres", "uri")
    # The same hashed ConfigMaps, with the same content, exist in both renders.
    api_pod = _one(prod, "Deployment", "deerflow-api")["spec"]["template"]["spec"]
    config_volume = {v["name"]: v for v in _job_pod(migrate)["volumes"]}["config"]
    api_volume = {v["name"]: v for v in api_pod["volumes"]}["config"]
    assert config_volume["configMap"] == api_volume["configMap"]
    for name in (
        config_volume["configMap"]["name"],
        container["envFrom"][0]["configMapRef"]["name"],
    ):
        assert _one(migrate, "ConfigMap", name)["data"] == _one(prod, "ConfigMap", name)["data"]


def test_the_job_meets_restricted_pod_security(migrate: Docs) -> None:
    assert policy_violations(migrate) == []
    job = _job(migrate)["spec"]
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod  # not the API's account (sandbox RBAC)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert 1 <= job["backoffLimit"] <= 6
    assert job["ttlSecondsAfterFinished"] > 0
    assert job["activeDeadlineSeconds"] > 0
    # Python needs a writable /tmp under a read-only root.
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])


def test_the_job_reaches_only_dns_and_postgres(prod: Docs, migrate: Docs) -> None:
    labels = _job(migrate)["spec"]["template"]["metadata"]["labels"]
    # Not a server pod: Redis (redis-ingress) and server-egress do not apply.
    assert "deerflow.dev/server" not in labels
    policy = _one(migrate, "NetworkPolicy", "migrate-egress")
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in policy["spec"]
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert ports == {53, 5432}
    (postgres,) = [r for r in policy["spec"]["egress"] if r["ports"][0]["port"] == 5432]
    server = _one(prod, "NetworkPolicy", "server-egress")
    (server_postgres,) = [r for r in server["spec"]["egress"] if r["ports"][0]["port"] == 5432]
    assert postgres["to"] == server_postgres["to"]


def test_prod_pods_only_verify_and_every_job_env_name_is_read(migrate: Docs) -> None:
    config_map = next(
        d for d in migrate if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {})
    )
    data = yaml.safe_load(config_map["data"]["config.yaml"])
    data.setdefault("auth", {}).setdefault("jwt", {})["secret"] = "s" * 64
    assert Settings.model_validate(data).database.setup == "verify"
    (container,) = _job_pod(migrate)["containers"]
    referenced = {"OPENAI_API_KEY", "PYTHONDONTWRITEBYTECODE", "DATABASE_URI"}
    names = {e["name"] for e in container["env"]}
    assert names <= set(ENV_OVERRIDES) | referenced


# --- the checks fail on a broken Job ------------------------------------------


@pytest.fixture
def k8s_copy(tmp_path: Path) -> Path:
    target = tmp_path / "k8s"
    shutil.copytree(K8S_DIR, target)
    return target


def test_policy_flags_a_job_that_may_escalate(k8s_copy: Path) -> None:
    job = k8s_copy / "overlays" / "prod-migrate" / "migrate-job.yaml"
    job.write_text(
        job.read_text().replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true")
    )
    problems = policy_violations(render(k8s_copy / "overlays" / "prod-migrate"))
    assert problems == [
        "Job/deerflow-migrate container migrate: allowPrivilegeEscalation is not false"
    ]
