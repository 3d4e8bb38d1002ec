"""``deploy/k8s/sandbox``: strict schema validation, RBAC scope and the network policy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runtime.config import PROJECT_ROOT, KubernetesSandboxConfig
from sandbox.k8s_manifests import METADATA_ADDRESSES, render_yaml

SANDBOX_DIR = PROJECT_ROOT / "deploy" / "k8s" / "sandbox"
VERSIONS = ("1.30", "1.35")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _validate(docs: list[dict[str, Any]]) -> None:
    """Every object against the strict schemas (unknown fields are errors)."""
    for doc in docs:
        for version in VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def _kustomize_resources(directory: Path) -> list[str]:
    return list(yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"])


def _render(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize`` where kubectl exists; otherwise the listed resources in order.

    The fallback is a real rendering for this folder (it only lists resources,
    no patches or generators), so the check never passes by doing nothing.
    """
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run(
            [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=True
        ).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]
    docs: list[dict[str, Any]] = []
    for name in _kustomize_resources(directory):
        docs.extend(_documents(directory / name))
    return docs


def test_every_yaml_file_is_listed_and_valid() -> None:
    listed = set(_kustomize_resources(SANDBOX_DIR))
    on_disk = {p.name for p in SANDBOX_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    for name in sorted(listed):
        _validate(_documents(SANDBOX_DIR / name))
    _validate(_documents(SANDBOX_DIR / "pvc" / "role.yaml"))


def test_rendered_base_is_complete_and_valid() -> None:
    docs = _render(SANDBOX_DIR)
    _validate(docs)
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    assert kinds == [
        "LimitRange/sandbox-limits",
        "Namespace/deerflow-sandbox",
        "NetworkPolicy/default-deny-all",
        "NetworkPolicy/sandbox-egress",
        "ResourceQuota/sandbox-quota",
        "Role/deerflow-sandbox-manager",
        "RoleBinding/deerflow-sandbox-manager",
    ]
    namespaces = {d["kind"]: d["metadata"].get("namespace") for d in docs}
    assert all(ns == "deerflow-sandbox" for kind, ns in namespaces.items() if kind != "Namespace")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="renders the component with kubectl")
def test_pvc_component_renders_into_an_overlay(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    shutil.copytree(SANDBOX_DIR, tmp_path / "sandbox")
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../sandbox]\ncomponents: [../sandbox/pvc]\n"
    )
    docs = _render(overlay)
    _validate(docs)
    assert {"Role/deerflow-sandbox-claims", "RoleBinding/deerflow-sandbox-claims"} <= {
        f"{d['kind']}/{d['metadata']['name']}" for d in docs
    }


def test_role_grants_exactly_what_the_provider_uses() -> None:
    (role,) = _documents(SANDBOX_DIR / "role.yaml")
    rules = {tuple(r["resources"]): sorted(r["verbs"]) for r in role["rules"]}
    assert rules == {
        ("pods",): sorted(["create", "get", "list", "watch", "delete", "patch"]),
        ("pods/exec",): ["create", "get"],
        ("leases",): ["create", "get", "patch"],  # the maintenance Lease (one owner)
    }
    (binding,) = _documents(SANDBOX_DIR / "rolebinding.yaml")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # The API's ServiceAccount, defined by the server's kustomize base (deploy/k8s/base).
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "deerflow-api", "namespace": "deerflow"}
    ]


def test_namespace_enforces_the_restricted_pod_security_level() -> None:
    (namespace,) = _documents(SANDBOX_DIR / "namespace.yaml")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_quota_and_limits_cover_the_provider_defaults() -> None:
    defaults = KubernetesSandboxConfig()
    (quota,) = _documents(SANDBOX_DIR / "resourcequota.yaml")
    assert int(quota["spec"]["hard"]["pods"]) == defaults.max_pods
    (limits,) = _documents(SANDBOX_DIR / "limitrange.yaml")
    container = next(item for item in limits["spec"]["limits"] if item["type"] == "Container")
    assert container["defaultRequest"] == defaults.resources.requests
    assert container["default"] == defaults.resources.limits


def test_committed_network_policy_matches_the_renderer() -> None:
    committed = (SANDBOX_DIR / "networkpolicy.yaml").read_text(encoding="utf-8")
    assert committed == render_yaml(KubernetesSandboxConfig())


def test_network_policy_denies_by_default_and_never_allows_metadata() -> None:
    deny, allow = _documents(SANDBOX_DIR / "networkpolicy.yaml")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert allow["spec"]["ingress"] == []
    blocks = [to for rule in allow["spec"]["egress"] for to in rule["to"] if "ipBlock" in to]
    assert blocks == []  # default: DNS only
    assert "169.254.169.254/32" in METADATA_ADDRESSES and "fd00:ec2::254/128" in METADATA_ADDRESSES


def test_the_validation_catches_a_broken_manifest() -> None:
    (role,) = _documents(SANDBOX_DIR / "role.yaml")
    role["rules"][0]["verbz"] = role["rules"][0].pop("verbs")
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate([role])
