"""Delegation tokens: how a remote subagent run is authenticated as its parent's user.

Why not forward the caller's own token: inside a run the graph does not have it
(LangGraph Server does not put ``Authorization`` into the run config, and it must
not: run configs are persisted), it may expire while runs wait in the queue, and
``langgraph_sdk.get_client(url=None)`` would skip authentication altogether, so
the child thread would belong to nobody.

Instead the ``task`` tool mints a short-lived delegation token for the parent
run's owner and sends it as ``Authorization: DeerflowDelegation <token>``. The
token is a JWT (HS256, PyJWT) with ``iss`` ``DELEGATION_ISSUER``, ``aud``
``DELEGATION_AUDIENCE`` (so neither a user's bearer token nor any other JWT
signed with the same key is accepted as one), ``exp`` (the task's timeout plus
a grace period, at most ``MAX_TTL_SECONDS``), ``iat``, ``jti``, and the claim
``threads``: the child thread id(s) it was minted for. The authorization
handlers let it create, run, read and cancel runs on those threads and search
for them, nothing else (``auth.handlers``; routes outside that set answer 403
in ``app.guard``).

The signing key is ``DEERFLOW_SUBAGENT_DELEGATION_SECRET`` when set (needed when
``subagents.remote.url`` points at other processes or replicas; at least 32
bytes), otherwise a random per-process key: the default remote path calls the
server's own ASGI app in-process, so the process that mints a token is the
process that verifies it.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt

from auth.identity import is_reserved_identity

__all__ = [
    "DELEGATION_AUDIENCE",
    "DELEGATION_ISSUER",
    "DELEGATION_SCHEME",
    "MAX_TTL_SECONDS",
    "SECRET_ENV",
    "DelegatedUser",
    "DelegationTokenError",
    "authenticate_delegation",
    "delegation_header",
    "mint_delegation_token",
    "verify_delegation_token",
]

DELEGATION_SCHEME = "DeerflowDelegation"
DELEGATION_ISSUER = "deerflow-server"
DELEGATION_AUDIENCE = "deerflow-subagent-delegation"
SECRET_ENV = "DEERFLOW_SUBAGENT_DELEGATION_SECRET"
MAX_TTL_SECONDS = 86400 + 300
_ALGORITHM = "HS256"
_MIN_SECRET_BYTES = 32
_MAX_TOKEN_CHARS = 4096
_MAX_THREADS = 16
_PROCESS_SECRET = secrets.token_bytes(32)


class DelegationTokenError(ValueError):
    """A delegation token that must be refused (the auth handler answers 401)."""


@dataclass(frozen=True)
class DelegatedUser:
    """Who a verified token speaks for, which threads it is bound to, and who delegated."""

    identity: str
    thread_ids: frozenset[str] = field(default_factory=frozenset)
    token_id: str = ""
    permissions: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    parent_thread_id: str | None = None
    parent_run_id: str | None = None


def _secret() -> bytes:
    configured = os.environ.get(SECRET_ENV)
    if not configured:
        return _PROCESS_SECRET
    raw = configured.encode("utf-8")
    if len(raw) < _MIN_SECRET_BYTES:
        raise DelegationTokenError(f"{SECRET_ENV} must be at least {_MIN_SECRET_BYTES} bytes long")
    return raw


def _thread_id(value: Any) -> str:
    """A canonical thread id (the server's UUIDs, lower-case with dashes)."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(f"not a thread id: {value!r}") from None


def mint_delegation_token(
    identity: str,
    *,
    thread_ids: Sequence[str],
    ttl_seconds: float,
    permissions: Sequence[str] = (),
    roles: Sequence[str] = (),
    parent_thread_id: str | None = None,
    parent_run_id: str | None = None,
    now: float | None = None,
) -> str:
    """A token that acts as ``identity`` on ``thread_ids`` only, for ``ttl_seconds``."""
    if not isinstance(identity, str) or not identity:
        raise ValueError("a delegation token needs a non-empty identity")
    threads = sorted({_thread_id(t) for t in thread_ids})
    if not threads or len(threads) > _MAX_THREADS:
        raise ValueError(f"a delegation token is bound to 1..{_MAX_THREADS} thread ids")
    issued = int(time.time() if now is None else now)
    ttl = int(max(1.0, min(float(ttl_seconds), MAX_TTL_SECONDS)))
    claims: dict[str, Any] = {
        "iss": DELEGATION_ISSUER,
        "aud": DELEGATION_AUDIENCE,
        "sub": identity,
        "iat": issued,
        "nbf": issued,
        "exp": issued + ttl,
        "jti": secrets.token_hex(16),
        "threads": threads,
        "perm": [str(p) for p in permissions],
        "roles": [str(r) for r in roles],
        "pt": parent_thread_id,
        "pr": parent_run_id,
    }
    return jwt.encode(claims, _secret(), algorithm=_ALGORITHM)


def verify_delegation_token(
    token: str,
    *,
    now: float | None = None,
    allow_reserved: Callable[[str], bool] | None = None,
) -> DelegatedUser:
    """The user ``token`` speaks for; ``DelegationTokenError`` if it is not valid now.

    Reserved identities (``auth.identity.is_reserved_identity``: the local user,
    Studio users, hashed-shape ids) are refused unless ``allow_reserved`` says
    the server itself would delegate for that one (the auth layer allows the
    local user in mode ``none`` and Studio users under Studio policy
    ``isolated``).
    """
    if not isinstance(token, str) or not token or len(token) > _MAX_TOKEN_CHARS:
        raise DelegationTokenError("malformed delegation token")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise DelegationTokenError("malformed delegation token") from None
    if header.get("alg") != _ALGORITHM:
        raise DelegationTokenError("malformed delegation token")
    current = time.time() if now is None else now
    try:
        claims = jwt.decode(
            token,
            _secret(),
            algorithms=[_ALGORITHM],
            audience=DELEGATION_AUDIENCE,
            issuer=DELEGATION_ISSUER,
            options={
                "require": ["exp", "iat", "jti", "sub", "aud", "iss"],
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.InvalidSignatureError:
        raise DelegationTokenError("bad delegation token signature") from None
    except (jwt.InvalidAudienceError, jwt.InvalidIssuerError):
        raise DelegationTokenError("not a delegation token") from None
    except jwt.PyJWTError:
        raise DelegationTokenError("malformed delegation token") from None
    identity, expires, issued = claims.get("sub"), claims.get("exp"), claims.get("iat")
    if not isinstance(identity, str) or not identity:
        raise DelegationTokenError("malformed delegation token")
    if not isinstance(expires, int) or not isinstance(issued, int):
        raise DelegationTokenError("malformed delegation token")
    # Checked here against ``now`` (PyJWT reads the wall clock), no leeway: the
    # issuer and verifier are the same deployment.
    if current >= expires:
        raise DelegationTokenError("expired delegation token")
    if issued > current + 5 or expires - issued > MAX_TTL_SECONDS:
        raise DelegationTokenError("delegation token lifetime out of range")
    if is_reserved_identity(identity) and not (allow_reserved and allow_reserved(identity)):
        raise DelegationTokenError("reserved identity")
    threads = claims.get("threads")
    if not isinstance(threads, list) or not threads or len(threads) > _MAX_THREADS:
        raise DelegationTokenError("delegation token is not bound to a thread")
    try:
        bound = frozenset(_thread_id(t) for t in threads)
    except ValueError:
        raise DelegationTokenError("malformed delegation token") from None
    return DelegatedUser(
        identity=identity,
        thread_ids=bound,
        token_id=str(claims["jti"]),
        permissions=_strings(claims.get("perm")),
        roles=_strings(claims.get("roles")),
        parent_thread_id=claims.get("pt") if isinstance(claims.get("pt"), str) else None,
        parent_run_id=claims.get("pr") if isinstance(claims.get("pr"), str) else None,
    )


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def delegation_header(token: str) -> dict[str, str]:
    return {"Authorization": f"{DELEGATION_SCHEME} {token}"}


def authenticate_delegation(
    authorization: str | None, *, allow_reserved: Callable[[str], bool] | None = None
) -> DelegatedUser | None:
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
    return verify_delegation_token(credentials.strip(), allow_reserved=allow_reserved)
