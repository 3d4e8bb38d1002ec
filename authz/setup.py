"""Build the configured authorizer and guardrail from settings, and authorize the run's model.

The providers are built once per settings object (the config is immutable once
loaded; a reload builds new ones), so per-call checks cost a dictionary lookup.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from authz.guardrails import RuleGuardrailProvider
from authz.principal import Principal
from authz.provider import FailClosedAuthorizer, RolePolicyProvider
from runtime.config import ConfigError, ModelConfig, Settings, import_object

__all__ = [
    "ModelAuthorization",
    "ModelAuthorizationError",
    "authorize_model",
    "authorizer_for",
    "guardrail_for",
]

logger = logging.getLogger("deerflow.authz")

_lock = threading.Lock()
_cache: dict[tuple[int, str], tuple[Settings, Any]] = {}


def _cached(settings: Settings, kind: str, build: Any) -> Any:
    key = (id(settings), kind)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] is settings:
            return hit[1]
    value = build()
    with _lock:
        if len(_cache) > 32:
            _cache.clear()
        _cache[key] = (settings, value)
    return value


def _custom(use: str, options: dict[str, Any], what: str) -> Any:
    factory = import_object(use, what=what)
    try:
        return factory(**options)
    except Exception as exc:
        raise ConfigError(f"{what}: cannot build {use} ({exc})") from exc


def authorizer_for(settings: Settings) -> FailClosedAuthorizer | None:
    """The fail-closed authorizer, or None while ``authorization.enabled`` is false."""
    config = settings.authorization
    if not config.enabled:
        return None

    def build() -> FailClosedAuthorizer:
        if config.use:
            provider = _custom(config.use, config.options, "authorization.use")
        else:
            provider = RolePolicyProvider(roles=config.roles, default_role=config.default_role)
        return FailClosedAuthorizer(provider)

    result: FailClosedAuthorizer = _cached(settings, "authorization", build)
    return result


def guardrail_for(settings: Settings) -> Any | None:
    """The configured guardrail provider (custom or the rule set), or None when off."""
    config = settings.guardrails
    if not config.enabled:
        return None

    def build() -> Any:
        if config.use:
            provider = _custom(config.use, config.options, "guardrails.use")
            if not callable(getattr(provider, "evaluate", None)):
                raise ConfigError(f"guardrails.use: {config.use} has no evaluate() method")
            return provider
        return RuleGuardrailProvider([r.model_dump() for r in config.rules])

    return _cached(settings, "guardrails", build)


class ModelAuthorizationError(ValueError):
    """The run may not use the model it asked for, and no fallback is allowed or possible.

    A ``ValueError`` on purpose: LangGraph Server shows the message of value
    errors to the client and replaces others' with "An internal error occurred".
    """


@dataclass(frozen=True)
class ModelAuthorization:
    entry: ModelConfig
    requested: str
    fallback_reason: str | None = None
    """Set when ``entry`` is not the requested model (recorded in run metadata)."""


def authorize_model(
    settings: Settings, principal: Principal, entry: ModelConfig
) -> ModelAuthorization:
    """``entry`` if the principal may use it, else the first allowed model (re-verified).

    Raises ``ModelAuthorizationError`` under ``authorization.fail_closed`` or
    when no configured model is allowed.
    """
    authorizer = authorizer_for(settings)
    if authorizer is None:
        return ModelAuthorization(entry, entry.name)
    decision = authorizer.authorize(principal, "model", "use", entry.name)
    if decision.allowed:
        return ModelAuthorization(entry, entry.name)
    reason = decision.reason or f"missing permission model:{entry.name}"
    if settings.authorization.fail_closed:
        raise ModelAuthorizationError(
            f"model {entry.name!r} is not allowed for this user ({reason}); "
            "authorization.fail_closed is set, so the run does not fall back"
        )
    for candidate in settings.models:
        if candidate.name == entry.name:
            continue
        if authorizer.authorize(principal, "model", "use", candidate.name).allowed:
            logger.info(
                "model %r denied for %s (%s); using %r",
                entry.name,
                principal.user_id,
                reason,
                candidate.name,
            )
            return ModelAuthorization(candidate, entry.name, fallback_reason=reason)
    raise ModelAuthorizationError(
        f"model {entry.name!r} is not allowed for this user ({reason}) and no configured "
        "model is allowed either"
    )
