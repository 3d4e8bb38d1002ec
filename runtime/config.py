"""Typed settings, loaded once per process from YAML plus environment variables.

Why one cached object: graph factories run on the server's event loop for every
run, so they must never touch the disk. The file is read once (off the loop via
``aget_settings``) and every later call returns the cached object.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

__all__ = [
    "ENV_OVERRIDES",
    "PROJECT_ROOT",
    "ConfigError",
    "KubernetesSandboxConfig",
    "ModelConfig",
    "Settings",
    "ToolConfig",
    "aget_settings",
    "config_path",
    "get_settings",
    "import_object",
    "load_settings",
    "reset_settings_cache",
]

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent

_ENV_REF = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")


class ConfigError(ValueError):
    """A configuration problem, with a message that names the key at fault."""


class _Section(BaseModel):
    """Base for config sections: unknown keys are typos, so they are errors."""

    model_config = ConfigDict(extra="forbid")


class ModelConfig(BaseModel):
    """One chat model entry. Keys other than the declared ones are constructor kwargs."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    use: str = Field(min_length=1, description="module.path:ClassName of a BaseChatModel")
    display_name: str | None = None
    description: str | None = None
    supports_vision: bool = False
    supports_thinking: bool = False
    context_window: int | None = Field(default=None, gt=0)
    thinking: dict[str, Any] | None = Field(
        default=None, description="extra constructor kwargs applied when thinking is enabled"
    )

    @field_validator("use")
    @classmethod
    def _use_shape(cls, value: str) -> str:
        if ":" not in value or value.startswith(":") or value.endswith(":"):
            raise ValueError("must look like 'module.path:ClassName'")
        return value

    def constructor_kwargs(self) -> dict[str, Any]:
        """The extra keys of the entry, which are passed to the model class."""
        return dict(self.model_extra or {})


class DatabaseConfig(_Section):
    """Postgres persistence (checkpointer and store). Empty URI means in-memory."""

    uri: str | None = None


class AuthConfig(_Section):
    """Authentication mode and its settings."""

    mode: Literal["none", "jwt", "api_key"] | None = None


class KubernetesResourcesConfig(_Section):
    """CPU, memory and ephemeral-storage requests and limits of a sandbox pod."""

    requests: dict[str, str] = Field(
        default_factory=lambda: {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "256Mi"}
    )
    limits: dict[str, str] = Field(
        default_factory=lambda: {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2Gi"}
    )


class KubernetesSecurityConfig(_Section):
    """The pod's security settings. The defaults pass the ``restricted`` Pod Security level."""

    run_as_user: int = Field(default=1000, ge=0)
    run_as_group: int = Field(default=1000, ge=0)
    fs_group: int | None = Field(default=1000, ge=0)
    run_as_non_root: bool = True
    read_only_root_filesystem: bool = True
    allow_privilege_escalation: bool = False
    drop_capabilities: list[str] = Field(default_factory=lambda: ["ALL"])
    add_capabilities: list[str] = Field(default_factory=list)
    seccomp_profile: Literal["RuntimeDefault", "Unconfined", "Localhost"] = "RuntimeDefault"
    seccomp_localhost_profile: str | None = None
    automount_service_account_token: bool = False
    enable_service_links: bool = False


class KubernetesWorkspaceConfig(_Section):
    """Where ``/mnt/user-data`` lives: a pod-lifetime ``emptyDir`` or a per-thread PVC."""

    type: Literal["emptyDir", "pvc"] = "emptyDir"
    size_limit: str = "1Gi"
    storage_class: str | None = None
    access_modes: list[str] = Field(default_factory=lambda: ["ReadWriteOnce"])


class KubernetesEgressRule(_Section):
    """One allowed egress destination for the sandbox NetworkPolicy."""

    cidr: str
    ports: list[int] = Field(default_factory=list, description="empty means every port")
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class KubernetesNetworkConfig(_Section):
    """Input of the rendered NetworkPolicy (``python -m sandbox.k8s_manifests``).

    The server does not apply it; operators render and apply it (or patch the
    committed manifest). Cloud metadata addresses are always denied.
    """

    allow_dns: bool = True
    egress: list[KubernetesEgressRule] = Field(default_factory=list)


class KubernetesSandboxConfig(_Section):
    """The Kubernetes sandbox provider (``sandbox.kubernetes:KubernetesSandboxProvider``)."""

    namespace: str = Field(default="deerflow-sandbox", min_length=1, max_length=63)
    server_id: str = Field(
        default="deerflow",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$",
        description="label value naming the pods this deployment owns",
    )
    image: str = "python:3.12-slim"
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    shell: str = "/bin/bash"
    python: str = Field(default="python3", description="interpreter of the in-pod helper")
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool | None = Field(
        default=None, description="None: in-cluster when KUBERNETES_SERVICE_HOST is set"
    )
    resources: KubernetesResourcesConfig = Field(default_factory=KubernetesResourcesConfig)
    security: KubernetesSecurityConfig = Field(default_factory=KubernetesSecurityConfig)
    workspace: KubernetesWorkspaceConfig = Field(default_factory=KubernetesWorkspaceConfig)
    tmp_size_limit: str = "256Mi"
    runtime_class_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    service_account_name: str | None = None
    priority_class_name: str | None = None
    skills_volume: dict[str, Any] | None = Field(
        default=None,
        description="a volume source mounted read-only at /mnt/skills, e.g. {configMap: {name: skills}}",
    )
    pod_labels: dict[str, str] = Field(default_factory=dict)
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(
        default_factory=dict, description="extra environment of every command (not secrets)"
    )
    idle_timeout_seconds: float = Field(default=900, gt=0)
    stale_active_seconds: float = Field(
        default=21600, gt=0, description="an 'active' pod silent this long is reaped"
    )
    reaper_interval_seconds: float = Field(default=60, gt=0)
    warm_pool_size: int = Field(default=0, ge=0)
    max_pods: int = Field(default=50, ge=1)
    ready_timeout_seconds: float = Field(default=120, gt=0)
    max_file_bytes: int = Field(
        default=100 * 1024 * 1024, ge=1024, description="upload/download size limit"
    )
    api_timeout_seconds: float = Field(default=30, gt=0)
    api_threads: int = Field(default=8, ge=2, le=256, description="threads for API calls")
    exec_threads: int = Field(
        default=64, ge=2, le=1024, description="threads for execs (one per running command)"
    )
    network: KubernetesNetworkConfig = Field(default_factory=KubernetesNetworkConfig)

    @model_validator(mode="after")
    def _check(self) -> KubernetesSandboxConfig:
        if self.workspace.type == "pvc" and self.warm_pool_size:
            raise ValueError(
                "warm_pool_size must be 0 with workspace.type 'pvc' (a warm pod cannot "
                "mount a thread's volume after it started)"
            )
        if self.warm_pool_size > self.max_pods:
            raise ValueError("warm_pool_size cannot exceed max_pods")
        if self.kubeconfig and self.in_cluster:
            raise ValueError("set either kubeconfig or in_cluster, not both")
        return self


class SandboxConfig(_Section):
    """Which sandbox provider runs the agent's shell and files."""

    use: str = "sandbox.local:LocalSandboxProvider"
    command_timeout_seconds: float = Field(default=300.0, gt=0, le=86400)
    max_output_bytes: int = Field(default=131072, ge=1024, le=64 * 1024 * 1024)
    max_read_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    secret_env_patterns: list[str] = Field(
        default_factory=list,
        description="extra env-name patterns kept out of commands (beyond *KEY* *SECRET* ...)",
    )
    kubernetes: KubernetesSandboxConfig = Field(default_factory=KubernetesSandboxConfig)


class SubagentsConfig(_Section):
    """Delegation to subagents through the ``task`` tool."""

    enabled: bool = True


class ToolConfig(BaseModel):
    """One tool: ``use`` names a ``BaseTool`` (or a zero-argument factory of one)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    group: str = Field(default="default", min_length=1)
    use: str = Field(min_length=1, description="module.path:name of a BaseTool or factory")


class ExtensionsConfig(_Section):
    """Operator-configured extension middlewares (trusted config: it imports code)."""

    middlewares: list[str | dict[str, Any]] = Field(default_factory=list)


class Settings(_Section):
    """The whole configuration. Every key is documented in ``config.example.yaml``."""

    models: list[ModelConfig] = Field(default_factory=list)
    data_root: str = ".deer-flow"
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    tools: list[ToolConfig] | None = Field(
        default=None, description="None means the built-in default tool set"
    )
    subagents: SubagentsConfig = Field(default_factory=SubagentsConfig)
    extensions: ExtensionsConfig = Field(default_factory=ExtensionsConfig)
    plugins: list[str] = Field(default_factory=list)

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelConfig]) -> list[ModelConfig]:
        seen: set[str] = set()
        for index, entry in enumerate(models):
            if entry.name in seen:
                raise ValueError(f"models[{index}]: duplicate model name {entry.name!r}")
            seen.add(entry.name)
        return models

    def model_by_name(self, name: str) -> ModelConfig | None:
        return next((m for m in self.models if m.name == name), None)

    @property
    def default_model(self) -> ModelConfig:
        if not self.models:
            raise ConfigError("models: no model is configured; add at least one entry")
        return self.models[0]

    def data_root_path(self) -> Path:
        root = Path(self.data_root).expanduser()
        return root if root.is_absolute() else PROJECT_ROOT / root


# Environment variables that override single config keys. Later issues add rows.
ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "DEERFLOW_DATA_ROOT": ("data_root",),
    "DEERFLOW_POSTGRES_URI": ("database", "uri"),
    "DEERFLOW_AUTH_MODE": ("auth", "mode"),
    "DEERFLOW_SANDBOX_USE": ("sandbox", "use"),
    "DEERFLOW_K8S_NAMESPACE": ("sandbox", "kubernetes", "namespace"),
    "DEERFLOW_K8S_IMAGE": ("sandbox", "kubernetes", "image"),
    "DEERFLOW_K8S_KUBECONFIG": ("sandbox", "kubernetes", "kubeconfig"),
}

# Built-in defaults when no config file exists: the offline scripted demo model,
# so `make dev` works on a fresh clone with no API key.
_DEFAULT_CONFIG: dict[str, Any] = {
    "models": [
        {
            "name": "scripted",
            "use": "runtime.scripted_model:ScriptedChatModel",
            "display_name": "Scripted demo model (offline)",
            "script": [
                {
                    "tool_calls": [
                        {
                            "name": "bash",
                            "args": {"description": "list the workspace", "command": "ls -la"},
                        }
                    ]
                },
                {"content": "I listed the workspace. This is the offline scripted demo model."},
            ],
        }
    ]
}


def config_path() -> Path:
    """The config file: ``DEERFLOW_CONFIG`` or ``config.yaml`` at the project root."""
    raw = os.environ.get("DEERFLOW_CONFIG")
    if raw:
        path = Path(raw).expanduser()
        return path if path.is_absolute() else Path.cwd() / path
    return PROJECT_ROOT / "config.yaml"


def _resolve_env_refs(value: Any, where: str) -> Any:
    """Replace ``$VAR`` / ``${VAR}`` string values with the environment's value."""
    if isinstance(value, dict):
        return {
            k: _resolve_env_refs(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_resolve_env_refs(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        match = _ENV_REF.match(value.strip())
        if match:
            name = match.group(1) or match.group(2)
            resolved = os.environ.get(name)
            if resolved is None:
                logger.warning("config %s: environment variable %s is not set", where, name)
            return resolved
    return value


def _apply_env_overrides(data: dict[str, Any]) -> None:
    for env_name, key_path in ENV_OVERRIDES.items():
        value = os.environ.get(env_name)
        if value is None or value == "":
            continue
        node = data
        for key in key_path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        node[key_path[-1]] = value


def _format_validation_error(source: str, error: ValidationError, data: dict[str, Any]) -> str:
    lines = []
    for item in error.errors():
        loc = item.get("loc", ())
        parts: list[str] = []
        for piece in loc:
            if isinstance(piece, int):
                parts[-1:] = [f"{parts[-1]}[{piece}]"] if parts else [f"[{piece}]"]
            else:
                parts.append(str(piece))
        key = ".".join(parts) or "(top level)"
        label = _entry_label(loc, data)
        message = item.get("msg", "invalid")
        if item.get("type") == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{key}{label}: {message}")
    return f"invalid config {source}: " + "; ".join(lines)


def _entry_label(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    """Name the model entry an error is in, so users find it without counting."""
    if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int):
        models = data.get("models")
        if isinstance(models, list) and loc[1] < len(models) and isinstance(models[loc[1]], dict):
            name = models[loc[1]].get("name")
            if name:
                return f" (model {name!r})"
    return ""


def import_object(path: str, *, what: str) -> Any:
    """Import ``module.path:Name``; errors name ``what`` (the config entry)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what}: {path!r} must look like 'module.path:Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import module {module_name!r} ({exc})") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(f"{what}: module {module_name!r} has no attribute {attr!r}") from exc


def load_settings(path: Path | None = None) -> Settings:
    """Read, resolve and validate the config. Blocking: call off the event loop."""
    source = path or config_path()
    if source.exists():
        try:
            raw = yaml.safe_load(source.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"invalid config {source}: not valid YAML ({exc})") from exc
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ConfigError(f"invalid config {source}: the top level must be a mapping")
        label = str(source)
    elif os.environ.get("DEERFLOW_CONFIG"):
        raise ConfigError(f"DEERFLOW_CONFIG names {source}, which does not exist")
    else:
        raw = _deep_copy(_DEFAULT_CONFIG)
        label = "(built-in defaults)"
    data = _resolve_env_refs(raw, "")
    _apply_env_overrides(data)
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(label, exc, data)) from None
    for index, entry in enumerate(settings.models):
        cls = import_object(entry.use, what=f"models[{index}] (model {entry.name!r}) use")
        if not isinstance(cls, type):
            raise ConfigError(
                f"models[{index}] (model {entry.name!r}) use: {entry.use!r} is not a class"
            )
    return settings


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


_cache: Settings | None = None
_cache_lock = threading.Lock()


def get_settings() -> Settings:
    """The process's settings, loaded on first use. Blocking on first call only."""
    global _cache
    if _cache is None:
        with _cache_lock:
            if _cache is None:
                _cache = load_settings()
    return _cache


async def aget_settings() -> Settings:
    """Async twin: the first load runs in a worker thread, never on the loop."""
    if _cache is not None:
        return _cache
    return await asyncio.to_thread(get_settings)


def reset_settings_cache() -> None:
    """Forget the cached settings (tests, and reloads after a config change)."""
    global _cache
    with _cache_lock:
        _cache = None
