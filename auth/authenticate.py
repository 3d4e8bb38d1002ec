"""Authentication: who is calling, by auth mode (``none``, ``jwt``, ``api_key``).

The mode is resolved per request from the cached settings, so a config change
(or a test's ``use_config``) takes effect on the next request. Failures raise
``Auth.exceptions.HTTPException``: 401 with a short reason for bad credentials,
403 when the server refuses to serve at all (mode ``none`` outside
``langgraph dev``, or an invalid config).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from langgraph_sdk import Auth

from auth.api_keys import match_api_key
from auth.delegation import DELEGATION_SCHEME, DelegationTokenError, authenticate_delegation
from auth.identity import DEFAULT_USER_ID, STUDIO_PREFIX
from auth.tokens import CredentialError, verify_token
from runtime.config import AuthConfig, ConfigError, Settings, aget_settings

__all__ = [
    "ANONYMOUS_IDENTITY",
    "NONE_OUTSIDE_DEV",
    "authenticate_request",
    "is_langgraph_dev",
    "load_auth_settings",
    "log_startup_status",
]

logger = logging.getLogger("deerflow.auth")

ANONYMOUS_IDENTITY = "anonymous"
NONE_OUTSIDE_DEV = (
    "auth mode 'none' is only allowed under `langgraph dev`; this server refuses "
    "every request. Set auth.mode (or DEERFLOW_AUTH_MODE) to jwt or api_key, or set "
    "DEERFLOW_AUTH_JWT_SECRET (README, section Auth)."
)
# Routes that answer without credentials (the project's own health route).
_PUBLIC_ROUTES = frozenset({("GET", "/health")})


def is_langgraph_dev() -> bool:
    """True under ``langgraph dev`` (and the in-process test server, which mimics it).

    The signal is the server's own: ``langgraph dev`` sets
    ``LANGSMITH_LANGGRAPH_API_VARIANT=local_dev`` for the server process; a
    production LangGraph Server never does.
    """
    return os.environ.get("LANGSMITH_LANGGRAPH_API_VARIANT") == "local_dev"


async def load_auth_settings() -> Settings:
    """The settings, or 403 when the config is invalid (fail closed, say why in the log).

    403, not 500: the server's auth middleware only turns 401/403 into a clean
    response; any other status from the authenticate handler becomes an
    unhandled error.
    """
    try:
        return await aget_settings()
    except ConfigError as exc:
        logger.error("auth refuses requests: the configuration is invalid: %s", exc)
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="server configuration is invalid; see the server log"
        ) from None


def _unauthorized(reason: str, scheme: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(
        status_code=401, detail=reason, headers={"WWW-Authenticate": scheme}
    )


def _header(headers: Mapping[bytes, bytes] | None, name: bytes) -> str | None:
    if not headers:
        return None
    raw = headers.get(name)
    if raw is None:
        return None
    return raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)


def _bearer(authorization: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None when there is no header."""
    if authorization is None or not authorization.strip():
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise CredentialError("malformed authorization header")
    return token.strip()


def _user(
    identity: str,
    *,
    mode: str,
    display_name: str | None = None,
    roles: list[str] | None = None,
    permissions: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "identity": identity,
        "display_name": display_name or identity,
        "is_authenticated": True,
        "permissions": list(permissions or []),
        "roles": list(roles or []),
        "auth_mode": mode,
    }


def _reserved_delegation_allowed(config: AuthConfig) -> Callable[[str], bool]:
    """Reserved identities the server itself delegates for, in this configuration.

    The local user ``default`` in mode ``none`` (where every caller is it), and
    Studio users under Studio policy ``isolated``; never a hashed-shape id.
    """

    def allowed(identity: str) -> bool:
        if identity == DEFAULT_USER_ID:
            return config.effective_mode == "none"
        if identity.startswith(STUDIO_PREFIX):
            return config.studio_policy == "isolated"
        return False

    return allowed


def _delegated_user(authorization: str | None, *, config: AuthConfig) -> dict[str, Any] | None:
    """The parent's user for a valid delegation token; 401 for a bad one; else None."""
    try:
        delegated = authenticate_delegation(
            authorization, allow_reserved=_reserved_delegation_allowed(config)
        )
    except DelegationTokenError as exc:
        raise _unauthorized(str(exc), DELEGATION_SCHEME) from None
    if delegated is None:
        return None
    user = _user(
        delegated.identity,
        mode=config.effective_mode,
        roles=list(delegated.roles),
        permissions=list(delegated.permissions),
    )
    user["delegated_subagent"] = True
    user["delegated_threads"] = sorted(delegated.thread_ids)
    user["delegation_id"] = delegated.token_id
    user["parent_thread_id"] = delegated.parent_thread_id
    user["parent_run_id"] = delegated.parent_run_id
    return user


async def authenticate_request(
    *,
    authorization: str | None,
    headers: Mapping[bytes, bytes] | None,
    path: str,
    method: str,
) -> dict[str, Any]:
    """The authenticated user (a ``MinimalUserDict`` plus ``roles`` and ``auth_mode``)."""
    if (method.upper(), path) in _PUBLIC_ROUTES:
        return {
            "identity": ANONYMOUS_IDENTITY,
            "display_name": ANONYMOUS_IDENTITY,
            "is_authenticated": False,
            "permissions": [],
            "roles": [],
            "auth_mode": "anonymous",
        }
    settings = await load_auth_settings()
    config = settings.auth
    mode = config.effective_mode
    if mode == "none" and not is_langgraph_dev():
        logger.error("refused %s %s: %s", method, path, NONE_OUTSIDE_DEV)
        raise Auth.exceptions.HTTPException(status_code=403, detail=NONE_OUTSIDE_DEV)
    # A remote subagent run started by the task tool for its parent run's user
    # (subagents/credentials.py): same owner as the parent, in every mode.
    delegated = _delegated_user(authorization, config=config)
    if delegated is not None:
        return delegated
    if mode == "none":
        return _user(DEFAULT_USER_ID, mode="none", display_name="Local user")
    if mode == "jwt":
        try:
            token = _bearer(authorization)
            if token is None:
                raise CredentialError("missing bearer token")
            verified = await verify_token(token, config.jwt)
        except CredentialError as exc:
            raise _unauthorized(exc.reason, "Bearer") from None
        return _user(
            verified.identity,
            mode="jwt",
            display_name=verified.display_name,
            roles=verified.roles,
            permissions=verified.permissions,
        )
    key = _header(headers, b"x-api-key")
    if key is None:
        try:
            key = _bearer(authorization)
        except CredentialError as exc:
            raise _unauthorized(exc.reason, "Bearer") from None
    if not key:
        raise _unauthorized("missing API key", "Bearer")
    entry = match_api_key(key.strip(), config.api_keys)
    if entry is None:
        raise _unauthorized("invalid API key", "Bearer")
    return _user(
        entry.identity,
        mode="api_key",
        display_name=entry.display_name,
        roles=entry.roles,
        permissions=entry.permissions,
    )


def log_startup_status() -> str:
    """Say loudly at start what auth does; never raises (requests fail closed instead).

    Runs when the server imports the auth module, before its event loop serves
    requests, so the blocking first settings load is fine here.
    """
    from runtime.config import get_settings

    try:
        config = get_settings().auth
    except ConfigError as exc:
        message = f"AUTH: the configuration is invalid, every request will be refused: {exc}"
        logger.critical(message)
        return message
    mode = config.effective_mode
    if mode == "none" and not is_langgraph_dev():
        message = f"AUTH: {NONE_OUTSIDE_DEV}"
        logger.critical("!" * 78)
        logger.critical(message)
        logger.critical("!" * 78)
        return message
    if mode == "none":
        message = (
            "AUTH: mode none (langgraph dev): every request is the local user "
            f"{DEFAULT_USER_ID!r}; Studio policy {config.studio_policy}"
        )
    else:
        message = f"AUTH: mode {mode}; Studio policy {config.studio_policy}"
    logger.warning(message)
    return message
