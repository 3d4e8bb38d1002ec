"""Offline checks of the rendered prod overlay at N replicas (issue 20 acceptance).

Each test reads what ``kubectl kustomize deploy/k8s/overlays/prod`` renders
(and the dev overlay where the rule applies to both), so a change to a
manifest that breaks a guarantee fails ``make test``.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import langgraph_api
import pytest
import yaml

from deploy.validate import K8S_DIR, render
from runtime.config import (
    ENV_OVERRIDES,
    OWN_SCHEMA,
    PROJECT_ROOT,
    Settings,
    with_own_schema,
)
from sandbox._k8s_pods import pod_manifest
from sandbox.k8s_manifests import PRIVATE_RANGES

Docs = list[dict[str, Any]]


@pytest.fixture(scope="module")
def prod() -> Docs:
    return render(K8S_DIR / "overlays" / "prod")


@pytest.fixture(scope="module")
def dev() -> Docs:
    return render(K8S_DIR / "overlays" / "dev")


def _of(docs: Docs, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d
        for d in docs
        if d["kind"] == kind and (name is None or d["metadata"]["name"].startswith(name))
    ]


def _one(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    (found,) = _of(docs, kind, name)
    return found


def _server_deployments(docs: Docs) -> list[dict[str, Any]]:
    return [
        d
        for d in _of(docs, "Deployment")
        if d["spec"]["template"]["metadata"]["labels"].get("deerflow.dev/server") == "true"
    ]


def _plain_env(docs: Docs) -> dict[str, str]:
    data: dict[str, str] = _one(docs, "ConfigMap", "deerflow-server-env")["data"]
    return data


def _prod_settings(docs: Docs) -> Settings:
    config_map = next(
        d for d in _of(docs, "ConfigMap", "deerflow-config") if "config.yaml" in d["data"]
    )
    data = yaml.safe_load(config_map["data"]["config.yaml"])
    plain = _plain_env(docs)
    data.setdefault("database", {})["schema"] = plain.get("DEERFLOW_POSTGRES_SCHEMA")
    # The JWT secret comes from a Secret at run time; stand one in to validate.
    data.setdefault("auth", {}).setdefault("jwt", {})["secret"] = "s" * 64
    return Settings.model_validate(data)


@pytest.mark.parametrize("overlay", ["prod", "dev"])
def test_no_replicas_under_an_autoscaler(overlay: str, request: pytest.FixtureRequest) -> None:
    docs: Docs = request.getfixturevalue(overlay)
    scaled = {d["spec"]["scaleTargetRef"]["name"] for d in _of(docs, "HorizontalPodAutoscaler")}
    scaled |= {d["spec"]["scaleTargetRef"]["name"] for d in _of(docs, "ScaledObject")}
    assert "deerflow-api" in scaled
    for deployment in _of(docs, "Deployment"):
        if deployment["metadata"]["name"] in scaled:
            assert "replicas" not in deployment["spec"], deployment["metadata"]["name"]
    # Queue workers scale on queue depth (KEDA), never on CPU.
    if overlay == "prod":
        (queue,) = _of(docs, "ScaledObject")
        assert queue["spec"]["scaleTargetRef"]["name"] == "deerflow-queue"
        assert "num_pending_runs" in queue["spec"]["triggers"][0]["metadata"]["query"]


def test_api_and_queue_workers_are_split(prod: Docs) -> None:
    by_name = {d["metadata"]["name"]: d for d in _server_deployments(prod)}
    assert set(by_name) == {"deerflow-api", "deerflow-queue"}
    api = by_name["deerflow-api"]["spec"]["template"]["spec"]["containers"][0]
    queue = by_name["deerflow-queue"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in api["env"]}
    queue_env = {e["name"]: e.get("value") for e in queue["env"]}
    assert env["N_JOBS_PER_WORKER"] == "0"
    assert int(queue_env["N_JOBS_PER_WORKER"]) > 0
    assert queue["command"] == ["python", "-m", "langgraph_api.queue_entrypoint"]
    assert api["image"] == queue["image"]


def test_grace_period_exceeds_prestop_plus_both_drains(prod: Docs) -> None:
    drain = int(_plain_env(prod)["BG_JOB_SHUTDOWN_GRACE_PERIOD_SECS"])
    for deployment in _server_deployments(prod):
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        # Our lifespan waits up to `drain` for runs holding sandboxes, then the
        # server drains up to `drain` again (app/server.py).
        assert pod["terminationGracePeriodSeconds"] > pre_stop + 2 * drain
        assert container["envFrom"] == [{"configMapRef": {"name": _config_map_name(prod)}}]


def _config_map_name(docs: Docs) -> str:
    name: str = _one(docs, "ConfigMap", "deerflow-server-env")["metadata"]["name"]
    return name


@pytest.mark.parametrize("overlay", ["prod", "dev"])
def test_every_namespace_has_a_default_deny_policy(
    overlay: str, request: pytest.FixtureRequest
) -> None:
    docs: Docs = request.getfixturevalue(overlay)
    namespaces = {d["metadata"]["name"] for d in _of(docs, "Namespace")}
    assert {"deerflow", "deerflow-sandbox"} <= namespaces
    denied = {
        d["metadata"].get("namespace")
        for d in _of(docs, "NetworkPolicy")
        if d["spec"]["podSelector"] == {}
        and sorted(d["spec"]["policyTypes"]) == ["Egress", "Ingress"]
        and not d["spec"].get("ingress")
        and not d["spec"].get("egress")
    }
    assert namespaces <= denied


def test_redis_requires_auth_and_only_server_pods_reach_it(prod: Docs) -> None:
    redis = _one(prod, "Deployment", "deerflow-redis")["spec"]["template"]["spec"]
    (container,) = redis["containers"]
    args = container["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    (password,) = [e for e in container["env"] if e["name"] == "REDIS_PASSWORD"]
    assert password["valueFrom"]["secretKeyRef"]["name"] == "deerflow-redis"
    for deployment in _server_deployments(prod):
        env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["REDIS_URI"]["value"].startswith("redis://:$(REDIS_PASSWORD)@")
        assert "secretKeyRef" in env["REDIS_PASSWORD"]["valueFrom"]
        names = list(env)
        assert names.index("REDIS_PASSWORD") < names.index("REDIS_URI")  # $(...) expands
    policy = _one(prod, "NetworkPolicy", "redis-ingress")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "deerflow-redis"}
    assert policy["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": {"deerflow.dev/server": "true"}}}],
            "ports": [{"protocol": "TCP", "port": 6379}],
        }
    ]


def test_api_ingress_only_from_the_ingress_controller_and_egress_is_bounded(
    prod: Docs,
) -> None:
    ingress = _one(prod, "NetworkPolicy", "api-ingress")["spec"]["ingress"]
    sources = [
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for rule in ingress
        for peer in rule["from"]
    ]
    assert sources == ["ingress-nginx", "monitoring"]
    egress = _one(prod, "NetworkPolicy", "server-egress")["spec"]["egress"]
    for rule in egress:
        for peer in rule["to"]:
            block = peer.get("ipBlock")
            if block and ipaddress.ip_network(block["cidr"]).prefixlen == 0:
                assert set(PRIVATE_RANGES[:6]) <= set(block["except"])
                assert [p["port"] for p in rule["ports"]] == [443]


def test_ingress_body_limit_covers_the_upload_limit_and_only_public_paths(prod: Docs) -> None:
    ingress = _one(prod, "Ingress", "deerflow-api")
    raw = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
    number, unit = re.fullmatch(r"(\d+)([kmg]?)", raw.lower()).groups()  # type: ignore[union-attr]
    limit = int(number) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]
    assert limit >= _prod_settings(prod).uploads.max_file_bytes
    paths = [p["path"] for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert "/" not in paths
    for private in ("/metrics", "/docs", "/openapi.json", "/internal/truncate", "/mcp"):
        assert not any(private == p or private.startswith(p.rstrip("/") + "/") for p in paths)
    assert {"/threads", "/runs", "/assistants", "/ok"} <= set(paths)


def test_our_schema_differs_from_the_servers_when_the_uris_match(prod: Docs) -> None:
    for deployment in _server_deployments(prod):
        env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        # One secret feeds both: the URIs match in production.
        assert env["DATABASE_URI"]["valueFrom"] == env["DEERFLOW_POSTGRES_URI"]["valueFrom"]
    uri = "postgresql://app:pw@db.internal:5432/langgraph"
    settings = _prod_settings(prod)
    settings = settings.model_copy(
        update={"database": settings.database.model_copy(update={"uri": uri})}
    )
    schema = with_own_schema(settings, uri).database.schema_name
    assert schema == OWN_SCHEMA and schema != "public"
    # Even without the explicit setting, the default moves away from public.
    bare = settings.model_copy(
        update={"database": settings.database.model_copy(update={"schema_name": None})}
    )
    assert with_own_schema(bare, uri).database.schema_name == OWN_SCHEMA


def _server_env_names() -> set[str]:
    """Every environment variable the installed LangGraph Server reads (its source)."""
    names: set[str] = set()
    pattern = re.compile(
        r"""(?:\benv|log_env|getenv|environ\.get|environ\[)\(?\s*["']([A-Z][A-Z0-9_]+)["']"""
    )
    for path in Path(langgraph_api.__file__).parent.rglob("*.py"):
        names |= set(pattern.findall(path.read_text(encoding="utf-8", errors="replace")))
    return names


def test_every_env_name_the_manifests_set_is_read_by_someone(prod: Docs, dev: Docs) -> None:
    server = _server_env_names()
    assert {"N_JOBS_PER_WORKER", "BG_JOB_SHUTDOWN_GRACE_PERIOD_SECS", "REDIS_URI"} <= server
    ours = set(ENV_OVERRIDES) | {"DEERFLOW_CONFIG"}
    for docs in (prod, dev):
        config_text = "\n".join(
            d["data"]["config.yaml"]
            for d in _of(docs, "ConfigMap", "deerflow-config")
            if "config.yaml" in d["data"]
        )
        referenced = set(re.findall(r"\$([A-Z][A-Z0-9_]+)", config_text))
        for deployment in _server_deployments(docs):
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            expanded = {
                name
                for e in container["env"]
                for name in re.findall(r"\$\(([A-Z0-9_]+)\)", e.get("value") or "")
            }
            names = {e["name"] for e in container["env"]} | set(_plain_env(docs))
            unknown = {n for n in names if n not in server | ours | referenced | expanded}
            assert unknown == set(), f"{deployment['metadata']['name']}: {sorted(unknown)}"


def test_tracing_is_an_explicit_switch_off_by_default(prod: Docs) -> None:
    assert _plain_env(prod)["LANGSMITH_TRACING"] == "false"


def test_langgraph_json_pins_the_server_version() -> None:
    config = json.loads((PROJECT_ROOT / "langgraph.json").read_text(encoding="utf-8"))
    assert re.fullmatch(r"\d+\.\d+\.\d+", config["api_version"])


def test_images_are_pinned(prod: Docs) -> None:
    settings = _prod_settings(prod)
    images = [settings.sandbox.kubernetes.image]
    for document in prod:
        pod = (document.get("spec") or {}).get("template", {}).get("spec")
        if pod:
            images += [
                c["image"] for c in pod.get("containers", []) + pod.get("initContainers", [])
            ]
    for image in images:
        exact = re.search(r"@sha256:[0-9a-f]{64}$", image) or re.search(
            r":\d+\.\d+\.\d+(-[a-z0-9.]+)?$", image
        )
        assert exact, f"{image} is not pinned to a digest or an exact version"
    deerflow = [i for i in images if "deerflow-server" in i]
    assert deerflow and all("@sha256:" in i for i in deerflow)  # deployed by digest


def test_thread_files_are_on_one_shared_volume_for_every_server_pod(prod: Docs) -> None:
    settings = _prod_settings(prod)
    assert settings.files.backend == "shared"
    claim = _one(prod, "PersistentVolumeClaim", "deerflow-thread-files")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for deployment in _server_deployments(prod):
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
        volume = volumes[mounts[settings.data_root]]
        assert volume["persistentVolumeClaim"]["claimName"] == "deerflow-thread-files"


def test_admission_policy_allows_exactly_the_configured_sandbox_pod(prod: Docs) -> None:
    settings = _prod_settings(prod)
    k8s = settings.sandbox.kubernetes
    policy = _one(prod, "ValidatingAdmissionPolicy", "deerflow-sandbox-pods")["spec"]
    variables = {v["name"]: v["expression"].strip("'") for v in policy["variables"]}
    assert variables["image"] == k8s.image and "@sha256:" in k8s.image
    assert variables["runtimeClass"] == k8s.runtime_class_name == "gvisor"
    assert policy["matchConditions"][0]["expression"].endswith(
        "'system:serviceaccount:deerflow:deerflow-api'"
    )
    rules = " ".join(v["expression"] for v in policy["validations"])
    assert "!has(object.spec.nodeName)" in rules
    binding = _one(prod, "ValidatingAdmissionPolicyBinding", "deerflow-sandbox-pods")["spec"]
    assert binding["validationActions"] == ["Deny"]
    assert binding["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": k8s.namespace
    }
    # The pod the provider builds from this config satisfies the policy's fields.
    pod = pod_manifest(k8s, name="deerflow-sbx-x", state="warm", now=0.0)
    spec = pod["spec"]
    assert {c["image"] for c in spec["containers"]} == {k8s.image}
    assert spec["runtimeClassName"] == "gvisor" and "nodeName" not in spec
    assert spec["nodeSelector"]["deerflow.dev/pool"] == "sandbox"
    assert all(t["key"] == "deerflow.dev/sandbox" for t in spec.get("tolerations", []))
    assert spec["automountServiceAccountToken"] is False
    assert all({"emptyDir", "persistentVolumeClaim", "configMap"} & set(v) for v in spec["volumes"])


def test_sandbox_capacity_matches_the_queue(prod: Docs) -> None:
    (queue,) = _of(prod, "ScaledObject")
    worker = _one(prod, "Deployment", "deerflow-queue")["spec"]["template"]["spec"]
    jobs = int(
        next(e["value"] for e in worker["containers"][0]["env"] if e["name"] == "N_JOBS_PER_WORKER")
    )
    capacity = queue["spec"]["maxReplicaCount"] * jobs
    assert _prod_settings(prod).sandbox.kubernetes.max_pods >= capacity
    quota = _one(prod, "ResourceQuota", "")["spec"]["hard"]
    pods = int(quota.get("pods") or quota.get("count/pods"))
    assert pods >= _prod_settings(prod).sandbox.kubernetes.max_pods
