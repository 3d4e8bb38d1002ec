"""Delegation credentials: how a remote subagent run is authenticated as its parent's user.

Why not forward the caller's own token: inside a run the graph does not have it
(LangGraph Server does not put ``Authorization`` into the run config, and it must
not: run configs are persisted), it may expire while runs wait in the queue, and
``langgraph_sdk.get_client(url=None)`` would skip authentication altogether, so
the child thread would belong to nobody.

Instead the ``task`` tool mints a short-lived delegation token for the parent
run's authenticated identity (``langgraph_auth_user``), signed with HMAC-SHA256,
and sends it as ``Authorization: DeerflowDelegation <token>``. The server's auth
handler accepts it through ``authenticate_delegation`` and so stamps the child
thread and run with the same owner as the parent; every ownership rule then
applies to the child unchanged.

The signing key is ``DEERFLOW_SUBAGENT_DELEGATION_SECRET`` when set (needed when
``subagents.remote.url`` points at other processes or replicas), otherwise a
random per-process key: the default remote path calls the server's own ASGI app
in-process, so the process that mints a token is the process that verifies it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DELEGATION_SCHEME",
    "SECRET_ENV",
    "DelegatedUser",
    "DelegationTokenError",
    "authenticate_delegation",
    "delegation_header",
    "mint_delegation_token",
    "verify_delegation_token",
]

DELEGATION_SCHEME = "DeerflowDelegation"
SECRET_ENV = "DEERFLOW_SUBAGENT_DELEGATION_SECRET"
_PREFIX = "dfd1"
_MIN_SECRET_BYTES = 32
_MAX_TOKEN_CHARS = 4096
_MAX_TTL_SECONDS = 2 * 86400
_PROCESS_SECRET = secrets.token_bytes(32)


class DelegationTokenError(ValueError):
    """A delegation token that must be refused (the auth handler answers 401)."""


@dataclass(frozen=True)
class DelegatedUser:
    """Who a verified token speaks for, and which run delegated."""

    identity: str
    permissions: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    parent_thread_id: str | None = None
    parent_run_id: str | None = None

    def as_auth_result(self) -> dict[str, Any]:
        """The dict an ``@auth.authenticate`` handler returns for this user."""
        return {
            "identity": self.identity,
            "permissions": list(self.permissions),
            "roles": list(self.roles),
            "is_delegated_subagent": True,
            "parent_thread_id": self.parent_thread_id,
            "parent_run_id": self.parent_run_id,
        }


def _secret() -> bytes:
    configured = os.environ.get(SECRET_ENV)
    if not configured:
        return _PROCESS_SECRET
    raw = configured.encode("utf-8")
    if len(raw) < _MIN_SECRET_BYTES:
        raise DelegationTokenError(f"{SECRET_ENV} must be at least {_MIN_SECRET_BYTES} bytes long")
    return raw


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_TOKEN_PART = re.compile(r"[A-Za-z0-9_-]+")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(body: str) -> str:
    digest = hmac.new(_secret(), f"{_PREFIX}.{body}".encode("ascii"), hashlib.sha256).digest()
    return _b64(digest)


def mint_delegation_token(
    identity: str,
    *,
    ttl_seconds: float,
    permissions: Sequence[str] = (),
    roles: Sequence[str] = (),
    parent_thread_id: str | None = None,
    parent_run_id: str | None = None,
    now: float | None = None,
) -> str:
    """A token that authenticates as ``identity`` for ``ttl_seconds`` (at most two days)."""
    if not isinstance(identity, str) or not identity:
        raise ValueError("a delegation token needs a non-empty identity")
    issued = time.time() if now is None else now
    ttl = max(1.0, min(float(ttl_seconds), _MAX_TTL_SECONDS))
    claims = {
        "sub": identity,
        "perm": [str(p) for p in permissions],
        "roles": [str(r) for r in roles],
        "pt": parent_thread_id,
        "pr": parent_run_id,
        "iat": int(issued),
        "exp": int(issued + ttl),
        "jti": secrets.token_hex(8),
    }
    body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    return f"{_PREFIX}.{body}.{_sign(body)}"


def verify_delegation_token(token: str, *, now: float | None = None) -> DelegatedUser:
    """The user ``token`` speaks for; ``DelegationTokenError`` if it is not valid now."""
    if not isinstance(token, str) or len(token) > _MAX_TOKEN_CHARS:
        raise DelegationTokenError("malformed delegation token")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise DelegationTokenError("malformed delegation token")
    body, signature = parts[1], parts[2]
    if not (_TOKEN_PART.fullmatch(body) and _TOKEN_PART.fullmatch(signature)):
        raise DelegationTokenError("malformed delegation token")
    if not hmac.compare_digest(_sign(body), signature):
        raise DelegationTokenError("bad delegation token signature")
    try:
        claims = json.loads(_unb64(body))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DelegationTokenError("malformed delegation token") from exc
    if not isinstance(claims, dict):
        raise DelegationTokenError("malformed delegation token")
    identity, expires = claims.get("sub"), claims.get("exp")
    if not isinstance(identity, str) or not identity or not isinstance(expires, int):
        raise DelegationTokenError("malformed delegation token")
    current = time.time() if now is None else now
    if current >= expires:
        raise DelegationTokenError("expired delegation token")
    parent_thread = claims.get("pt") if isinstance(claims.get("pt"), str) else None
    parent_run = claims.get("pr") if isinstance(claims.get("pr"), str) else None
    return DelegatedUser(
        identity=identity,
        permissions=_strings(claims.get("perm")),
        roles=_strings(claims.get("roles")),
        parent_thread_id=parent_thread,
        parent_run_id=parent_run,
    )


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def delegation_header(token: str) -> dict[str, str]:
    return {"Authorization": f"{DELEGATION_SCHEME} {token}"}


def authenticate_delegation(authorization: str | None) -> DelegatedUser | None:
    """For the server's ``@auth.authenticate`` handler.

    None when the header does not use the delegation scheme (the handler goes on
    with its own schemes); the verified user when it does; and
    ``DelegationTokenError`` when it uses the scheme with a bad token (the
    handler must answer 401: fail closed).
    """
    if not authorization:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme != DELEGATION_SCHEME:
        return None
    return verify_delegation_token(credentials.strip())
