"""Typed settings, loaded once per process from YAML plus environment variables.

Why one cached object: graph factories run on the server's event loop for every
run, so they must never touch the disk. The file is read once (off the loop via
``aget_settings``) and every later call returns the cached object.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any, Literal

import psycopg
import yaml
from psycopg.conninfo import conninfo_to_dict
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from deerflow_extension_api.loading import ConfigError, import_object
from runtime.identity import is_reserved_identity, use_studio_policy_source
from runtime.paths import default_data_root

__all__ = [
    "BUILTIN_SUBAGENT_TYPES",
    "ENV_OVERRIDES",
    "OWN_SCHEMA",
    "PROJECT_ROOT",
    "ApiKeyEntry",
    "AuthConfig",
    "AuthorizationConfig",
    "CircuitBreakerConfig",
    "ClarificationConfig",
    "ConfigError",
    "DatabaseConfig",
    "DatabaseKeepalivesConfig",
    "DatabasePoolConfig",
    "DynamicContextConfig",
    "ExtensionMiddlewareConfig",
    "ExtensionsConfig",
    "GuardrailRuleConfig",
    "GuardrailsConfig",
    "JwtAuthConfig",
    "KubernetesSandboxConfig",
    "LLMErrorHandlingConfig",
    "LoopDetectionConfig",
    "McpServerConfig",
    "MemoryConfig",
    "MemoryEmbeddingsConfig",
    "ModelConfig",
    "PiiRedactionConfig",
    "PluginConfig",
    "ReadBeforeWriteConfig",
    "SafetyFinishReasonConfig",
    "Settings",
    "SetupMode",
    "SubagentTypeConfig",
    "SubagentsConfig",
    "SummarizationConfig",
    "TitleConfig",
    "TodoConfig",
    "TokenBudgetConfig",
    "TokenUsageConfig",
    "ToolConfig",
    "ToolOutputConfig",
    "ToolProgressConfig",
    "ToolSearchConfig",
    "VerificationConfig",
    "WebConfig",
    "aget_settings",
    "builtin_config",
    "config_path",
    "get_settings",
    "import_object",
    "load_settings",
    "reset_settings_cache",
    "same_database",
    "with_own_schema",
]

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent

_ENV_REF = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")


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


_SQL_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

# What a process does with our tables at startup (``database.setup``).
SetupMode = Literal["migrate", "verify", "off"]
_SETUP_ALIASES = {
    "true": "migrate",
    "yes": "migrate",
    "1": "migrate",
    "false": "off",
    "no": "off",
    "0": "off",
}


class DatabasePoolConfig(_Section):
    """``psycopg_pool.AsyncConnectionPool`` sizing and timeouts (seconds)."""

    min_size: int = Field(default=1, ge=0, description="connections kept open")
    max_size: int = Field(default=10, ge=1, description="upper bound, incl. checkpointer + store")
    timeout: float = Field(default=30.0, gt=0, description="wait for a free connection")
    max_idle: float = Field(default=300.0, gt=0, description="close idle extra connections")
    max_lifetime: float = Field(default=3600.0, gt=0, description="recycle connections")
    reconnect_timeout: float = Field(
        default=10.0,
        gt=0,
        description="background reconnect attempts (with backoff) stop after this; later "
        "requests reconnect on demand, so a short value means a quick recovery",
    )
    check: bool = Field(default=True, description="probe a connection before handing it out")

    @model_validator(mode="after")
    def _sizes(self) -> DatabasePoolConfig:
        if self.max_size < self.min_size:
            raise ValueError("max_size must be >= min_size")
        return self


class DatabaseKeepalivesConfig(_Section):
    """TCP keepalives, so dead peers (failover, NAT timeouts) are noticed."""

    enabled: bool = True
    idle: int = Field(default=30, ge=1, description="seconds idle before the first probe")
    interval: int = Field(default=10, ge=1, description="seconds between probes")
    count: int = Field(default=3, ge=1, description="lost probes before the link is dead")


class DatabaseConfig(_Section):
    """Postgres persistence (checkpointer and store). No URI means in-memory.

    Why ``prepare_threshold`` defaults to None: server-side prepared statements
    break behind a transaction pooler (PgBouncer in transaction mode), so they
    are off unless the operator knows the connection is direct.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    uri: str | None = Field(
        default=None,
        description="postgresql://user:pass@host:port/db (or a libpq key=value string)",
    )
    schema_name: str | None = Field(
        default=None, alias="schema", description="created if missing; used via search_path"
    )
    connect_timeout: int = Field(default=10, ge=1)
    application_name: str = Field(default="deerflow-server", min_length=1, max_length=63)
    prepare_threshold: int | None = Field(default=None, ge=0)
    setup: SetupMode = Field(
        default="migrate",
        description="at startup: migrate (create/upgrade tables), verify (refuse to start "
        "unless `python -m runtime.migrate` brought them up to date) or off",
    )
    pool: DatabasePoolConfig = Field(default_factory=DatabasePoolConfig)
    keepalives: DatabaseKeepalivesConfig = Field(default_factory=DatabaseKeepalivesConfig)

    @field_validator("uri")
    @classmethod
    def _uri_shape(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        # Never echo the value in an error: it may hold a password.
        if "://" in value and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// (or postgres://) URI")
        try:
            conninfo_to_dict(value)
        except psycopg.Error:
            raise ValueError("is not a valid Postgres URI or connection string") from None
        return value

    @field_validator("setup", mode="before")
    @classmethod
    def _setup_mode(cls, value: Any) -> Any:
        # `true`/`false` were the only values before the migration job existed.
        if isinstance(value, bool):
            return "migrate" if value else "off"
        if isinstance(value, str):
            lowered = value.strip().lower()
            return _SETUP_ALIASES.get(lowered, lowered)
        return value

    @field_validator("schema_name")
    @classmethod
    def _schema_identifier(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not _SQL_IDENTIFIER.match(value):
            raise ValueError("must be a plain SQL identifier (letters, digits, _; max 63)")
        return value


AuthMode = Literal["none", "jwt", "api_key"]
StudioPolicy = Literal["local", "isolated", "deny"]

_HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
_PUBLIC_KEY_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
_MIN_SECRET_LENGTH = 32


class JwtAuthConfig(_Section):
    """Bearer JWT verification: a shared secret (HS*) and/or public keys (RS*/ES*/PS*/EdDSA)."""

    secret: SecretStr | None = Field(
        default=None, description="HS256 shared secret; env DEERFLOW_AUTH_JWT_SECRET"
    )
    public_key: str | None = Field(default=None, description="PEM public key (RS*/ES*/PS*/EdDSA)")
    jwks_url: str | None = Field(
        default=None, description="JWKS endpoint, fetched async, cached; env DEERFLOW_AUTH_JWKS_URL"
    )
    jwks_cache_seconds: int = Field(default=300, ge=1, le=86400)
    algorithms: list[str] | None = Field(
        default=None, description="allowed algs; default HS256 (secret), RS256+ES256 (keys)"
    )
    issuer: str | None = None
    audience: list[str] | None = None
    leeway_seconds: int = Field(default=30, ge=0, le=300)
    require_exp: bool = True
    identity_claim: str = Field(default="sub", min_length=1)
    roles_claim: str | None = "roles"
    permissions_claim: str | None = "permissions"
    display_name_claim: str | None = "name"

    @field_validator("audience", mode="before")
    @classmethod
    def _audience_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("secret")
    @classmethod
    def _secret_length(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < _MIN_SECRET_LENGTH:
            raise ValueError(f"must be at least {_MIN_SECRET_LENGTH} characters")
        return value

    @field_validator("public_key")
    @classmethod
    def _public_key_pem(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from cryptography.hazmat.primitives.serialization import load_pem_public_key

        try:
            load_pem_public_key(value.strip().encode("ascii"))
        except (ValueError, UnicodeEncodeError) as exc:
            raise ValueError("is not a PEM public key") from exc
        return value.strip()

    @field_validator("jwks_url")
    @classmethod
    def _jwks_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL")
        return value

    @property
    def has_key_material(self) -> bool:
        return bool(self.secret or self.public_key or self.jwks_url)

    def allowed_algorithms(self) -> list[str]:
        """The configured algorithms, or the defaults for the configured keys."""
        if self.algorithms is not None:
            return list(self.algorithms)
        result: list[str] = []
        if self.secret is not None:
            result.append("HS256")
        if self.public_key or self.jwks_url:
            result.extend(["RS256", "ES256"])
        return result

    @model_validator(mode="after")
    def _audience_with_public_keys(self) -> JwtAuthConfig:
        # An IdP's keys sign tokens for many applications: without an audience,
        # any token it issued for another app would be accepted here.
        if (self.public_key or self.jwks_url) and not self.audience:
            raise ValueError(
                "jwt.audience is required with jwt.public_key or jwt.jwks_url "
                "(env DEERFLOW_AUTH_JWT_AUDIENCE): tokens the identity provider issues "
                "for other applications must not be accepted"
            )
        return self

    @model_validator(mode="after")
    def _algorithms_match_keys(self) -> JwtAuthConfig:
        for alg in self.algorithms or []:
            if alg in _HMAC_ALGORITHMS:
                if self.secret is None:
                    raise ValueError(f"algorithms: {alg} needs jwt.secret")
            elif alg in _PUBLIC_KEY_ALGORITHMS:
                if not (self.public_key or self.jwks_url):
                    raise ValueError(f"algorithms: {alg} needs jwt.public_key or jwt.jwks_url")
            else:
                raise ValueError(f"algorithms: {alg!r} is not supported")
        return self


class ApiKeyEntry(_Section):
    """One static API key, stored only as the SHA-256 hex digest of the key."""

    identity: str = Field(min_length=1, max_length=256)
    sha256: str = Field(description="hex SHA-256 of the key (python -m auth new-api-key)")
    display_name: str | None = None
    roles: list[str] = Field(default_factory=list)
    permissions: list[str] = Field(default_factory=list)

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str) -> str:
        value = value.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError("must be 64 hex characters (the SHA-256 of the key, not the key)")
        return value

    @field_validator("identity")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if is_reserved_identity(value):
            raise ValueError(f"{value!r} is reserved for the server")
        return value


class AuthConfig(_Section):
    """Authentication mode and its settings (see the README's "Auth" section)."""

    mode: AuthMode | None = Field(
        default=None, description="env DEERFLOW_AUTH_MODE; unset: jwt if jwt keys, else none"
    )
    jwt: JwtAuthConfig = Field(default_factory=JwtAuthConfig)
    api_keys: list[ApiKeyEntry] = Field(default_factory=list)
    studio: StudioPolicy | None = Field(
        default=None, description="LangGraph Studio user: local (mode none), isolated, deny"
    )

    @property
    def effective_mode(self) -> AuthMode:
        """``mode``, else ``jwt`` when JWT keys are configured, else ``api_key`` when
        ``api_keys`` are, else ``none``."""
        if self.mode is not None:
            return self.mode
        if self.jwt.has_key_material:
            return "jwt"
        return "api_key" if self.api_keys else "none"

    @property
    def studio_policy(self) -> StudioPolicy:
        """``studio``, else ``local`` in mode ``none`` and ``deny`` otherwise."""
        if self.studio is not None:
            return self.studio
        return "local" if self.effective_mode == "none" else "deny"

    @model_validator(mode="after")
    def _mode_requirements(self) -> AuthConfig:
        mode = self.effective_mode
        if mode == "jwt" and not self.jwt.has_key_material:
            raise ValueError(
                "mode jwt needs jwt.secret (or DEERFLOW_AUTH_JWT_SECRET), "
                "jwt.public_key or jwt.jwks_url"
            )
        if mode == "jwt" and not self.jwt.allowed_algorithms():
            raise ValueError("jwt.algorithms: no algorithm is allowed")
        if mode == "api_key" and not self.api_keys:
            raise ValueError("mode api_key needs at least one api_keys entry")
        if mode == "none" and self.api_keys:
            # Keys that are never checked would leave the server open without a word.
            raise ValueError(
                "api_keys are configured but mode is none, which checks no key: "
                "set mode api_key (or leave mode unset) or remove api_keys"
            )
        digests = [entry.sha256 for entry in self.api_keys]
        if len(set(digests)) != len(digests):
            raise ValueError("api_keys: two entries have the same sha256")
        if self.studio == "local" and mode != "none":
            raise ValueError(f"studio: 'local' is only valid with mode none (mode is {mode})")
        return self


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

    allow_dns: bool = Field(
        default=False, description="the provider needs no DNS in the pod; off by default"
    )
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
    replica_id: str | None = Field(
        default=None,
        max_length=128,
        description="this server replica's name in pod holder annotations and the Lease "
        "(None: the pod's HOSTNAME plus a random suffix)",
    )
    lease_duration_seconds: float = Field(
        default=60,
        gt=0,
        description="the maintenance Lease and a pod's holder heartbeat expire after this",
    )

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


class SandboxLimitsConfig(_Section):
    """Resource limits of every local sandbox command (``setrlimit``; 0 = inherited)."""

    max_processes: int = Field(default=256, ge=0, le=1_000_000)
    max_memory_mb: int = Field(default=2048, ge=0, description="address space (RLIMIT_AS)")
    max_cpu_seconds: int = Field(default=600, ge=0)
    max_file_mb: int = Field(default=1024, ge=0, description="largest file a command writes")
    max_open_files: int = Field(default=1024, ge=0)


class SandboxConfig(_Section):
    """Which sandbox provider runs the agent's shell and files, and its limits.

    The default local provider runs each command in its own Linux namespaces
    where the machine allows it (``isolation``); see ``docs/sandbox.md``.
    """

    use: str = "sandbox.local:LocalSandboxProvider"
    lazy_init: bool = Field(
        default=True, description="acquire on the first sandbox tool call, not at run start"
    )
    thread_dirs_lazy_init: bool = Field(
        default=True, description="create thread directories on first use, not at run start"
    )
    allow_host_bash: bool = Field(
        default=True, description="local provider: allow shell commands on the host"
    )
    command_timeout_seconds: float = Field(default=300.0, gt=0, le=86400)
    max_output_bytes: int = Field(default=131072, ge=1024, le=64 * 1024 * 1024)
    max_read_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    skills_dir: str | None = Field(
        default=None,
        description="host directory shown as-is at /mnt/skills; None = the projection of "
        "the enabled skills (`skills` section)",
    )
    secret_env_patterns: list[str] = Field(
        default_factory=list,
        description="extra env-name patterns kept out of commands (beyond *KEY* *SECRET* ...)",
    )
    isolation: Literal["auto", "required", "off"] = Field(
        default="auto",
        description="local provider: run commands in Linux namespaces (auto: when available)",
    )
    allow_unisolated_bash: bool = Field(
        default=False,
        description="local provider: run commands on the host when they cannot be isolated "
        "(always allowed in auth mode none)",
    )
    network: bool = Field(
        default=False, description="local provider: isolated commands get the host's network"
    )
    limits: SandboxLimitsConfig = Field(default_factory=SandboxLimitsConfig)
    search_timeout_seconds: float = Field(
        default=10.0, gt=0, le=600, description="grep/glob stop with a clear error after this"
    )
    kubernetes: KubernetesSandboxConfig = Field(default_factory=KubernetesSandboxConfig)

    @field_validator("use")
    @classmethod
    def _use_shape(cls, value: str) -> str:
        if ":" not in value or value.startswith(":") or value.endswith(":"):
            raise ValueError("must look like 'module.path:ClassName'")
        return value


class UploadsConfig(_Section):
    """Limits of the HTTP upload route (``POST /threads/{thread_id}/uploads``)."""

    max_file_bytes: int = Field(default=50 * 1024 * 1024, ge=1)
    max_files: int = Field(default=20, ge=1, le=1000)


class LoopDetectionConfig(_Section):
    """LoopDetectionMiddleware (32): warn on, then stop, repeated tool calls in a run."""

    enabled: bool = True
    warn_threshold: int = Field(default=3, ge=1, description="identical calls before a warning")
    hard_limit: int = Field(default=5, ge=2, description="identical calls that stop the run")
    tool_frequency_warn: int = Field(default=30, ge=1, description="calls of one tool: warning")
    tool_frequency_hard: int = Field(default=50, ge=2, description="calls of one tool: stop")

    @model_validator(mode="after")
    def _ordered(self) -> LoopDetectionConfig:
        if self.warn_threshold >= self.hard_limit:
            raise ValueError("warn_threshold must be below hard_limit")
        if self.tool_frequency_warn >= self.tool_frequency_hard:
            raise ValueError("tool_frequency_warn must be below tool_frequency_hard")
        return self


class DynamicContextConfig(_Section):
    """DynamicContextMiddleware (17): today's date as hidden, request-only context.

    On by default (the spec installs it always); it never enters persisted
    history. ``enabled: false`` is an escape hatch, not a supported mode.
    """

    enabled: bool = True


class TitleConfig(_Section):
    """TitleMiddleware (24): a thread title after the first full exchange."""

    enabled: bool = True
    model: str | None = Field(
        default=None, description="a `models` entry that writes titles; null = first user line"
    )
    max_chars: int = Field(default=60, ge=8, le=200)


class ToolGroupsConfig(_Section):
    """Which tool groups each agent gets; ``null`` means every group.

    Capability-gated groups stay gated: ``vision`` needs a model with
    ``supports_vision``, ``sandbox`` (bash) needs a provider that allows commands.
    A subagent's configured tools come from its type (``subagents.types``);
    ``subagent`` decides whether subagents get the ``mcp`` group.
    """

    lead_agent: list[str] | None = None
    subagent: list[str] | None = Field(
        default_factory=lambda: ["sandbox", "files", "vision", "web", "mcp"]
    )

    def for_kind(self, kind: str) -> list[str] | None:
        return self.lead_agent if kind == "lead_agent" else self.subagent


SUBAGENT_TYPE_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
BUILTIN_SUBAGENT_TYPES: tuple[str, ...] = ("general-purpose", "bash")


class SubagentTypeConfig(_Section):
    """A custom subagent type offered by the ``task`` tool beside the built-ins."""

    name: str = Field(pattern=SUBAGENT_TYPE_NAME_PATTERN)
    description: str = Field(min_length=1, description="shown to the lead in the task tool")
    system_prompt: str = Field(min_length=1)
    tools: list[str] | None = Field(
        default=None,
        description="tool names or 'group:<group>'; None = the general-purpose tool set",
    )
    model: str = Field(default="inherit", min_length=1, description="a model name or 'inherit'")
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    timeout_seconds: float | None = Field(default=None, gt=0, le=86400)
    skills: list[str] | None = Field(
        default=None, description="the only skills this type may use; None = the parent's"
    )


class SubagentsRemoteConfig(_Section):
    """Where ``execution: remote`` starts subagent runs."""

    url: str | None = Field(
        default=None,
        description="base URL of the LangGraph Server; None = this server, in-process",
    )
    graph_id: str = Field(default="subagent", min_length=1)

    @field_validator("url")
    @classmethod
    def _https_unless_loopback(cls, value: str | None) -> str | None:
        # The delegation token (a bearer credential for the user) travels to it.
        if value is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        host = (parts.hostname or "").lower()
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        if parts.scheme == "https" and host:
            return value
        if parts.scheme == "http" and loopback:
            return value
        raise ValueError(
            "must be an https:// URL (plain http only for localhost/127.0.0.1/::1): "
            "a delegation token is sent to it"
        )


class SubagentsConfig(_Section):
    """Delegation to subagents through the ``task`` tool.

    ``enabled`` is the master switch: a run may turn subagents off with
    ``subagent_enabled: false`` but cannot turn them on when this is false.
    Limits are clamped where they are resolved (``subagents.limits``), so an
    out-of-range value never fails a run.
    """

    enabled: bool = True
    execution: Literal["inprocess", "remote"] = "inprocess"
    model: str = Field(default="inherit", min_length=1)
    max_concurrent_subagents: int = 3
    max_running: int = 8
    max_tasks_per_response: int = 6
    max_total_per_run: int = 6
    timeout_seconds: float = Field(default=900.0, gt=0, le=86400)
    max_turns: int = Field(default=50, ge=1, le=1000)
    types: list[SubagentTypeConfig] = Field(default_factory=list)
    remote: SubagentsRemoteConfig = Field(default_factory=SubagentsRemoteConfig)

    @field_validator("types")
    @classmethod
    def _unique_type_names(cls, types: list[SubagentTypeConfig]) -> list[SubagentTypeConfig]:
        seen: set[str] = set(BUILTIN_SUBAGENT_TYPES)
        for index, entry in enumerate(types):
            if entry.name in seen:
                what = "a built-in type" if entry.name in BUILTIN_SUBAGENT_TYPES else "a duplicate"
                raise ValueError(f"types[{index}]: {entry.name!r} is {what}")
            seen.add(entry.name)
        return types


SKILL_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,63}$"


class SkillsConfig(_Section):
    """Skills: folders of know-how (``SKILL.md`` + files) the agent discovers and activates.

    ``skills/public`` ships with this repository; ``custom_path`` holds the
    deployment's own (a custom skill wins over a public one of the same name).
    """

    enabled: bool = True
    public_path: str = Field(
        default="skills/public", description="shipped skills (relative to the project)"
    )
    custom_path: str = Field(default="skills/custom", description="the deployment's own skills")
    disabled: list[str] = Field(default_factory=list, description="skill names switched off")
    agents: dict[str, list[str]] = Field(
        default_factory=dict,
        description="agent_name -> the only skills that named agent may use",
    )
    max_body_chars: int = Field(
        default=60000, ge=1000, le=1_000_000, description="SKILL.md bodies longer than this are cut"
    )


class ReadBeforeWriteConfig(_Section):
    """ReadBeforeWriteMiddleware (spec 13): writes to existing files need a fresh read."""

    enabled: bool = True
    elide_blocked_payloads: bool = Field(
        default=True, description="hide blocked write payloads from later model requests"
    )
    elide_min_chars: int = Field(
        default=256, ge=0, description="payloads shorter than this stay visible"
    )


class ToolConfig(BaseModel):
    """One tool: ``use`` names a ``BaseTool`` (or a zero-argument factory of one)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    group: str = Field(default="default", min_length=1)
    use: str = Field(min_length=1, description="module.path:name of a BaseTool or factory")
    deferred: bool = Field(
        default=False, description="hidden until promoted when tool_search is enabled"
    )


def _json_compatible(value: Any, where: str) -> Any:
    """``value`` as JSON data; YAML dates and timestamps become ISO strings."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_json_compatible(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: key {key!r} is not a string")
            result[key] = _json_compatible(item, f"{where}.{key}")
        return result
    raise ValueError(f"{where}: {type(value).__name__} is not JSON-compatible")


def _class_path(value: str) -> str:
    if ":" not in value or value.startswith(":") or value.endswith(":"):
        raise ValueError("must look like 'module.path:ClassName'")
    return value


class ExtensionMiddlewareConfig(BaseModel):
    """One ``extensions.middlewares`` entry: ``{class, kwargs}`` (or just the class string)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    class_path: str = Field(alias="class", min_length=1, description="module.path:ClassName")
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"class": data} if isinstance(data, str) else data

    @field_validator("class_path")
    @classmethod
    def _shape(cls, value: str) -> str:
        return _class_path(value)

    @field_validator("kwargs", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("must be a mapping of JSON-compatible values")
        return _json_compatible(value, "kwargs")


class ExtensionsConfig(_Section):
    """Operator-configured extension middlewares (trusted config: it imports code)."""

    middlewares: list[ExtensionMiddlewareConfig] = Field(default_factory=list)


class PluginConfig(BaseModel):
    """One ``plugins:`` entry: a module whose ``install(registry, config)`` runs at load."""

    model_config = ConfigDict(extra="forbid")

    module: str = Field(min_length=1, description="package.module or package.module:function")
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"module": data} if isinstance(data, str) else data

    @field_validator("config", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("must be a mapping of JSON-compatible values")
        return _json_compatible(value, "config")


class ToolOutputConfig(_Section):
    """ToolOutputBudgetMiddleware: how much tool output reaches the model inline."""

    enabled: bool = True
    max_chars: int = Field(
        default=20_000, ge=1_000, description="model-bound text budget per result"
    )
    head_chars: int = Field(default=3_000, ge=0)
    tail_chars: int = Field(default=2_000, ge=0)
    storage_subdir: str = Field(default=".tool-results", min_length=1)
    exempt_tools: list[str] = Field(default_factory=list)
    inline_fallback_max_chars: int = Field(
        default=100_000, ge=1_000, description="kept inline when the output cannot be saved"
    )
    elide_superseded_writes: bool = True
    superseded_write_min_chars: int = Field(default=2_000, ge=0)
    keep_recent_writes: int = Field(default=1, ge=0)

    @field_validator("storage_subdir")
    @classmethod
    def _relative_subdir(cls, value: str) -> str:
        parts = value.replace("\\", "/").split("/")
        if value.startswith("/") or any(p in {"", ".", ".."} for p in parts):
            raise ValueError("must be a relative directory name inside outputs (no '..')")
        return value


PiiDetector = Literal["email", "phone", "credit_card", "ssn", "ipv4", "iban"]
PII_DETECTORS: tuple[str, ...] = ("email", "phone", "credit_card", "ssn", "ipv4", "iban")


class PiiRedactionConfig(_Section):
    """PiiRedactionMiddleware (off by default): regex detectors, irreversible placeholders."""

    enabled: bool = False
    detectors: list[PiiDetector] = Field(
        default_factory=lambda: list(PII_DETECTORS)  # type: ignore[arg-type]
    )
    hash_key: str | None = Field(
        default=None, description="secret mixed into placeholders; set it to resist guessing"
    )


class CircuitBreakerConfig(_Section):
    """Fast-fail while a provider keeps failing; one probe tests recovery."""

    enabled: bool = True
    failure_threshold: int = Field(default=5, ge=1)
    recovery_timeout: float = Field(default=30.0, gt=0)


class LLMErrorHandlingConfig(_Section):
    """LLMErrorHandlingMiddleware: retries, Retry-After, circuit breaker, fallback."""

    enabled: bool = True
    max_retries: int = Field(default=3, ge=0, le=20)
    base_delay: float = Field(default=1.0, ge=0)
    max_delay: float = Field(default=30.0, ge=0)
    # A longer Retry-After is not waited for (the run gets the fallback answer):
    # minutes, not hours, so one rate-limited call cannot hold a worker.
    retry_after_max_seconds: float = Field(default=300.0, ge=0, le=86_400.0)
    circuit_breaker: CircuitBreakerConfig = Field(default_factory=CircuitBreakerConfig)


class VerificationConfig(_Section):
    """Tool receipts (ToolReceiptMiddleware) and their hidden ledger."""

    receipts_enabled: bool = True
    receipt_ledger_max_chars: int = Field(default=2_000, ge=200)


class ClarificationConfig(_Section):
    """ClarificationMiddleware (40): how ``ask_clarification`` pauses the run.

    ``interrupt`` (default): a LangGraph interrupt that Studio and the SDK
    resume with ``Command(resume=<answer>)``. ``end``: the spec's
    ``Command(goto=END)`` form; the next user message is the answer.
    """

    mode: Literal["interrupt", "end"] = "interrupt"


class SafetyFinishReasonConfig(_Section):
    """SafetyFinishReasonMiddleware (off by default)."""

    enabled: bool = False
    finish_reasons: list[str] = Field(
        default_factory=lambda: [
            "content_filter",
            "safety",
            "refusal",
            "recitation",
            "prohibited_content",
            "blocklist",
            "spii",
        ]
    )


class RunsConfig(_Section):
    """Admission limits for runs, decided when a run is created."""

    max_active_per_user: int = Field(
        default=10,
        ge=0,
        le=100_000,
        description="pending + running runs one user may have at once (429 beyond); 0 = no cap",
    )


_PERMISSION = re.compile(r"^(\*|[a-z_]+:(\*|[A-Za-z0-9_.:/@+-]+))$")


class AuthorizationConfig(_Section):
    """Who may use which tools, models and the sandbox (GuardrailMiddleware, slot 11).

    Off by default. When on, nothing is allowed without a permission that grants
    it: ``tool:<name>``, ``tool:*``, ``model:<name>``, ``model:*``,
    ``sandbox:execute`` or ``*``.
    """

    enabled: bool = False
    use: str | None = Field(
        default=None, description="module:Class of a custom AuthorizationProvider"
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments for the custom provider"
    )
    roles: dict[str, list[str]] = Field(
        default_factory=dict, description="role -> permissions (the built-in role policy)"
    )
    default_role: str | None = Field(default=None, description="the role of users with none")
    fail_closed: bool = Field(
        default=False,
        description="a run asking for a model it may not use fails instead of falling back",
    )

    @model_validator(mode="after")
    def _policy(self) -> AuthorizationConfig:
        if self.default_role is not None and self.default_role not in self.roles:
            raise ValueError(f"default_role: {self.default_role!r} is not one of roles")
        for role, permissions in self.roles.items():
            for permission in permissions:
                if not _PERMISSION.fullmatch(permission):
                    raise ValueError(
                        f"roles.{role}: {permission!r} is not a permission "
                        "(like tool:bash, model:*, sandbox:execute or *)"
                    )
        return self


class GuardrailRuleConfig(_Section):
    """One built-in guardrail rule: a denied argument pattern and/or a per-run call cap."""

    tool: str = Field(default="*", min_length=1, description="a tool name, or * for every tool")
    deny_pattern: str | None = Field(
        default=None, description="regex searched in the call's arguments"
    )
    max_calls_per_run: int | None = Field(default=None, ge=0)
    reason: str | None = Field(default=None, description="shown to the model when denied")

    @model_validator(mode="after")
    def _something(self) -> GuardrailRuleConfig:
        if self.deny_pattern is None and self.max_calls_per_run is None:
            raise ValueError("a rule needs deny_pattern or max_calls_per_run")
        if self.deny_pattern is not None:
            try:
                re.compile(self.deny_pattern)
            except re.error as exc:
                raise ValueError(f"deny_pattern: not a valid regex ({exc})") from None
        return self


class GuardrailsConfig(_Section):
    """Guardrails on every tool call, for every user (GuardrailMiddleware, slot 11)."""

    enabled: bool = False
    use: str | None = Field(default=None, description="module:Class of a GuardrailProvider")
    options: dict[str, Any] = Field(default_factory=dict)
    rules: list[GuardrailRuleConfig] = Field(default_factory=list)


class ToolProgressConfig(_Section):
    """ToolProgressMiddleware (14): stop a run from grinding on a failing tool."""

    enabled: bool = False
    retryable_failures_to_block: int = Field(
        default=3, ge=1, description="consecutive retryable failures of one tool that block it"
    )


class MemoryEmbeddingsConfig(BaseModel):
    """Any LangChain ``Embeddings``; keys other than ``use`` and ``dims`` are kwargs."""

    model_config = ConfigDict(extra="allow")

    use: str = Field(min_length=1, description="module.path:ClassName of an Embeddings")
    dims: int = Field(gt=0, le=16384, description="vector size the class produces")

    def constructor_kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class MemoryConfig(_Section):
    """Long-term memory per user (MemoryMiddleware, slot 25; recall by DynamicContext, 17)."""

    enabled: bool = False
    mode: Literal["auto", "tool"] = Field(
        default="auto", description="auto: background extraction; tool: memory_* tools"
    )
    model: str | None = Field(
        default=None, description="a models entry for extraction; null: the run's model"
    )
    embeddings: MemoryEmbeddingsConfig | None = Field(
        default=None, description="semantic recall through the store's index; null: keywords"
    )
    debounce_seconds: float = Field(default=2.0, ge=0, le=3600)
    max_queue: int = Field(default=100, ge=1, le=100_000)
    extraction_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    recall_limit: int = Field(default=5, ge=0, le=50)
    recall_max_chars: int = Field(default=1500, ge=0, le=20_000)
    recall_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    max_memories_per_user: int = Field(default=1000, ge=1, le=100_000)
    max_memory_chars: int = Field(default=500, ge=20, le=5000)


class SummarizationConfig(_Section):
    """SummarizationMiddleware (21): compact the history near the model's context window.

    The trigger and the kept tail are fractions of the *run model's*
    ``context_window`` (a token count wins when set); ``model`` only writes the
    summary. Skill-bundle rescue keeps recent ``/mnt/skills`` reads verbatim.
    """

    enabled: bool = False
    model: str | None = Field(
        default=None, description="a `models` entry that writes summaries; null = the run model"
    )
    trigger_fraction: float = Field(default=0.8, gt=0, le=1)
    trigger_tokens: int | None = Field(default=None, ge=1)
    keep_fraction: float = Field(default=0.3, gt=0, lt=1)
    keep_tokens: int | None = Field(default=None, ge=1)
    fallback_context_window: int = Field(
        default=128_000, ge=256, description="used when the run model declares no context_window"
    )
    trim_tokens_to_summarize: int | None = Field(default=4000, ge=1)
    skills_path_prefix: str = "/mnt/skills"
    preserve_recent_skill_count: int = Field(default=5, ge=0)
    preserve_recent_skill_tokens: int = Field(default=25_000, ge=0)
    preserve_recent_skill_tokens_per_skill: int = Field(default=5_000, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> SummarizationConfig:
        if self.keep_fraction >= self.trigger_fraction:
            raise ValueError("summarization: keep_fraction must be below trigger_fraction")
        if self.trigger_tokens and self.keep_tokens and self.keep_tokens >= self.trigger_tokens:
            raise ValueError("summarization: keep_tokens must be below trigger_tokens")
        return self


class TodoConfig(_Section):
    """TodoListMiddleware (22, plan mode): DeerFlow's reminders around ``write_todos``."""

    completion_reminders: int = Field(
        default=1, ge=0, description="jump-backs per run when the model stops with open todos"
    )
    window_reminder: bool = Field(
        default=True, description="remind when the live todos' write_todos left the window"
    )


class TokenUsageConfig(_Section):
    """TokenUsageMiddleware (23): per-run token usage in state, metadata and an event."""

    enabled: bool = False


class TokenBudgetConfig(_Section):
    """TokenBudgetMiddleware (33): stop a run that spends more than its budget."""

    enabled: bool = False
    max_tokens_per_run: int | None = Field(default=None, ge=1)
    subagent_max_tokens_per_run: int | None = Field(
        default=None, ge=1, description="a subagent run's own budget; null = max_tokens_per_run"
    )


class FilesConfig(_Section):
    """Where thread files (uploads, outputs, workspaces, externalised tool results) live.

    ``local``: the data root on this machine's disk (development, one
    process). ``shared``: the data root is a directory every server replica
    and queue worker mounts (a ReadWriteMany volume); it must be an absolute
    path, and the server refuses to start when it is missing or read-only,
    rather than write files only one replica sees.
    """

    backend: Literal["local", "shared"] = "local"


class McpServerConfig(_Section):
    """One MCP server whose tools the agents get (``mcp_servers.<name>``)."""

    transport: Literal["stdio", "streamable_http", "sse"] = "stdio"
    command: str | None = Field(default=None, description="stdio: the program to run")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = Field(
        default=None, description="stdio: the server's environment ($VAR values resolve)"
    )
    url: str | None = Field(default=None, description="streamable_http / sse endpoint")
    headers: dict[str, str] = Field(
        default_factory=dict, description="HTTP headers; $VAR / ${VAR} inside values resolve"
    )
    enabled: bool = True
    tools: list[str] | None = Field(
        default=None, description="allow-list of the server's tool names; null: all"
    )
    timeout: float = Field(default=30.0, gt=0, le=3600, description="seconds per call")
    deferred: bool = Field(
        default=True, description="hidden until promoted when tool_search is enabled"
    )

    @model_validator(mode="after")
    def _transport_needs(self) -> McpServerConfig:
        if self.transport == "stdio" and not self.command:
            raise ValueError("transport stdio needs command")
        if self.transport != "stdio":
            if not self.url:
                raise ValueError(f"transport {self.transport} needs url")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError("url must be http(s)")
        return self


class WebConfig(_Section):
    """The ``web`` tool group: ``web_fetch`` and ``web_search``."""

    fetch_max_bytes: int = Field(default=2_000_000, ge=1024, le=50_000_000)
    fetch_max_chars: int = Field(default=50_000, ge=1000, le=1_000_000)
    fetch_timeout_seconds: float = Field(default=20.0, gt=0, le=300)
    allow_private_networks: list[str] = Field(
        default_factory=list,
        description="CIDRs or host names web_fetch may reach although private/loopback",
    )
    search_use: str = Field(
        default="tools.web:TavilySearchProvider",
        description="module:Class of the web_search provider",
    )
    search_options: dict[str, Any] = Field(default_factory=dict)
    search_max_results: int = Field(default=5, ge=1, le=20)


class ToolSearchConfig(_Section):
    """Deferred tools (MCP tools, tools marked ``deferred``) and ``tool_search`` (slots 27-29)."""

    enabled: bool = False
    max_results: int = Field(default=5, ge=1, le=50)


class Settings(_Section):
    """The whole configuration. Every key is documented in ``config.example.yaml``."""

    models: list[ModelConfig] = Field(default_factory=list)
    # Empty: runtime.paths.default_data_root() (outside the tree `langgraph dev` watches).
    data_root: str = ""
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    tools: list[ToolConfig] | None = Field(
        default=None, description="None means the built-in default tool set"
    )
    dynamic_context: DynamicContextConfig = Field(default_factory=DynamicContextConfig)
    loop_detection: LoopDetectionConfig = Field(default_factory=LoopDetectionConfig)
    title: TitleConfig = Field(default_factory=TitleConfig)
    tool_groups: ToolGroupsConfig = Field(default_factory=ToolGroupsConfig)
    uploads: UploadsConfig = Field(default_factory=UploadsConfig)
    subagents: SubagentsConfig = Field(default_factory=SubagentsConfig)
    read_before_write: ReadBeforeWriteConfig = Field(default_factory=ReadBeforeWriteConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    extensions: ExtensionsConfig = Field(default_factory=ExtensionsConfig)
    plugins: list[PluginConfig] = Field(default_factory=list)
    tool_output: ToolOutputConfig = Field(default_factory=ToolOutputConfig)
    pii_redaction: PiiRedactionConfig = Field(default_factory=PiiRedactionConfig)
    llm_error_handling: LLMErrorHandlingConfig = Field(default_factory=LLMErrorHandlingConfig)
    verification: VerificationConfig = Field(default_factory=VerificationConfig)
    safety_finish_reason: SafetyFinishReasonConfig = Field(default_factory=SafetyFinishReasonConfig)
    clarification: ClarificationConfig = Field(default_factory=ClarificationConfig)
    runs: RunsConfig = Field(default_factory=RunsConfig)
    authorization: AuthorizationConfig = Field(default_factory=AuthorizationConfig)
    guardrails: GuardrailsConfig = Field(default_factory=GuardrailsConfig)
    tool_progress: ToolProgressConfig = Field(default_factory=ToolProgressConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    summarization: SummarizationConfig = Field(default_factory=SummarizationConfig)
    todo: TodoConfig = Field(default_factory=TodoConfig)
    token_usage: TokenUsageConfig = Field(default_factory=TokenUsageConfig)
    token_budget: TokenBudgetConfig = Field(default_factory=TokenBudgetConfig)
    files: FilesConfig = Field(default_factory=FilesConfig)

    @model_validator(mode="after")
    def _shared_files_root(self) -> Settings:
        if self.files.backend == "shared" and not Path(self.data_root).expanduser().is_absolute():
            raise ValueError(
                "files.backend 'shared' needs an absolute data_root (the mount path of the "
                "volume every replica shares)"
            )
        return self

    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    web: WebConfig = Field(default_factory=WebConfig)
    tool_search: ToolSearchConfig = Field(default_factory=ToolSearchConfig)

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
        if not self.data_root.strip():
            return default_data_root()
        root = Path(self.data_root).expanduser()
        return root if root.is_absolute() else PROJECT_ROOT / root


# Environment variables that override single config keys. Later issues add rows.
ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "DEERFLOW_DATA_ROOT": ("data_root",),
    "DEERFLOW_FILES_BACKEND": ("files", "backend"),
    "DEERFLOW_POSTGRES_URI": ("database", "uri"),
    "DEERFLOW_POSTGRES_SCHEMA": ("database", "schema"),
    "DEERFLOW_POSTGRES_SETUP": ("database", "setup"),
    "DEERFLOW_AUTH_MODE": ("auth", "mode"),
    "DEERFLOW_AUTH_JWT_SECRET": ("auth", "jwt", "secret"),
    "DEERFLOW_AUTH_JWKS_URL": ("auth", "jwt", "jwks_url"),
    "DEERFLOW_AUTH_JWT_AUDIENCE": ("auth", "jwt", "audience"),
    "DEERFLOW_SANDBOX_USE": ("sandbox", "use"),
    "DEERFLOW_K8S_NAMESPACE": ("sandbox", "kubernetes", "namespace"),
    "DEERFLOW_K8S_IMAGE": ("sandbox", "kubernetes", "image"),
    "DEERFLOW_K8S_KUBECONFIG": ("sandbox", "kubernetes", "kubeconfig"),
    "DEERFLOW_SANDBOX_ALLOW_HOST_BASH": ("sandbox", "allow_host_bash"),
    "DEERFLOW_SUBAGENTS_ENABLED": ("subagents", "enabled"),
    "DEERFLOW_SUBAGENTS_EXECUTION": ("subagents", "execution"),
    "DEERFLOW_SUBAGENTS_URL": ("subagents", "remote", "url"),
    "DEERFLOW_READ_BEFORE_WRITE": ("read_before_write", "enabled"),
    "DEERFLOW_PII_REDACTION_ENABLED": ("pii_redaction", "enabled"),
    "DEERFLOW_SKILLS_CUSTOM_PATH": ("skills", "custom_path"),
}

# Built-in defaults when no config file exists: the offline scripted demo model,
# so `make dev` works on a fresh clone with no API key. It plays a short guided
# tour, one chapter per message, and starts over after the last one.
_TOUR_FILE = "/mnt/user-data/outputs/tour-{cycle}.md"
_DEMO_TOUR: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {
                "name": "bash",
                "args": {"description": "look around the workspace", "command": "ls -la"},
            }
        ]
    },
    {
        "content": "Hello! I am the offline demo model of deerflow-server: a script, no API "
        "key needed. I just ran `ls` in this thread's sandbox (that was a tool call). "
        "Send another message to continue the tour (1/4)."
    },
    {
        "tool_calls": [
            {
                "name": "write_file",
                "args": {
                    "description": "write a file for the user",
                    "path": _TOUR_FILE,
                    "content": "# Hello from the demo\n\nFiles under /mnt/user-data/outputs "
                    "can be presented to the user.\n",
                },
            }
        ]
    },
    {"tool_calls": [{"name": "present_files", "args": {"filepaths": [_TOUR_FILE]}}]},
    {
        "content": "I wrote a Markdown file and presented it: it is listed in this thread's "
        "`artifacts`. Send another message to see a subagent (2/4)."
    },
    {
        "tool_calls": [
            {
                "name": "task",
                "args": {
                    "description": "demo delegation",
                    "prompt": "Look around your workspace and report what you see.",
                    "subagent_type": "general-purpose",
                },
            }
        ]
    },
    {
        "content": "A subagent ran in its own context and reported back: its answer is "
        "the `task` tool result above. Send another message for the last stop (3/4)."
    },
    {
        "content": "That was the tour (4/4): tool calls, files, subagents. To talk to a real "
        "model, copy config.example.yaml to config.yaml and put your key in .env (see "
        "the README). Any further message starts the tour again."
    },
]
_DEFAULT_CONFIG: dict[str, Any] = {
    "models": [
        {
            "name": "scripted",
            "use": "runtime.scripted_model:ScriptedChatModel",
            "display_name": "Scripted demo model (offline)",
            "tour": True,
            "script": _DEMO_TOUR,
        }
    ]
}


def builtin_config() -> dict[str, Any]:
    """A copy of the built-in defaults used when there is no config file."""
    return _deep_copy(_DEFAULT_CONFIG)


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


# Where our checkpointer and store keep their tables when they share a
# database with the LangGraph Server: never ``public``, where the licensed
# server's own runtime keeps tables of the same names (``checkpoints*``,
# ``store``) under its own migrations.
OWN_SCHEMA = "deerflow"


def same_database(first: str | None, second: str | None) -> bool:
    """Whether two Postgres URIs name the same database (host, port, dbname)."""
    if not first or not second:
        return False
    try:
        a, b = conninfo_to_dict(first), conninfo_to_dict(second)
    except psycopg.Error:
        return False  # e.g. ``:memory:`` under ``langgraph dev``

    def target(d: dict[str, Any]) -> tuple[str, str, str]:
        return (
            str(d.get("host") or d.get("hostaddr") or "localhost"),
            str(d.get("port") or "5432"),
            str(d.get("dbname") or d.get("user") or ""),
        )

    return target(a) == target(b)


def with_own_schema(settings: Settings, server_uri: str | None) -> Settings:
    """Default ``database.schema`` to ``OWN_SCHEMA`` when our URI is the server's database.

    An explicit ``database.schema`` is kept, unless it is ``public`` on the
    server's database: that is refused (the tables would collide).
    """
    db = settings.database
    if not same_database(db.uri, server_uri):
        return settings
    if db.schema_name is None:
        logger.info(
            "database: DEERFLOW_POSTGRES_URI is the server's database; using schema %r",
            OWN_SCHEMA,
        )
        database = db.model_copy(update={"schema_name": OWN_SCHEMA})
        return settings.model_copy(update={"database": database})
    if db.schema_name == "public":
        raise ConfigError(
            "database.schema is 'public' on the LangGraph Server's own database "
            "(DATABASE_URI): our checkpoints and store tables would collide with the "
            f"server's; use another schema (default {OWN_SCHEMA!r})"
        )
    return settings


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
    settings = with_own_schema(settings, os.environ.get("DATABASE_URI"))
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


# ``principal_of`` (a leaf module) reads the Studio policy from the settings.
use_studio_policy_source(lambda: get_settings().auth.studio_policy)
