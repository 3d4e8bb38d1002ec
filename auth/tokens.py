"""Bearer JWT verification for auth mode ``jwt``, and minting dev tokens.

Every failure becomes ``CredentialError`` with a short, fixed reason
("token expired", "invalid signature", ...): the caller learns what class of
problem it has and nothing about the server's keys, issuer or audience.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jwt

from auth.delegation import DELEGATION_AUDIENCE, DELEGATION_ISSUER
from auth.identity import is_reserved_identity
from auth.jwks import JwksCache, JwksError, jwks_cache
from runtime.config import JwtAuthConfig

__all__ = ["CredentialError", "VerifiedToken", "mint_token", "verify_token"]

_HMAC = frozenset({"HS256", "HS384", "HS512"})
_MAX_TOKEN_LENGTH = 16_384


class CredentialError(Exception):
    """Missing, malformed or invalid credentials (answered with 401)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class VerifiedToken:
    identity: str
    display_name: str | None = None
    roles: list[str] = field(default_factory=list)
    permissions: list[str] = field(default_factory=list)


@lru_cache(maxsize=8)
def _public_key(pem: str) -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    return load_pem_public_key(pem.encode("ascii"))


def _claim(claims: Mapping[str, Any], path: str | None) -> Any:
    """A claim by name, or by dotted path (``realm_access.roles``)."""
    if not path:
        return None
    if path in claims:
        return claims[path]
    node: Any = claims
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _string_list(value: Any) -> list[str]:
    """A list claim, or a space-separated string (the OAuth ``scope`` style)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part for part in value.split() if part]
    if isinstance(value, Sequence):
        return [str(item) for item in value if isinstance(item, str | int) and str(item)]
    return []


async def _key_for(config: JwtAuthConfig, alg: str, kid: str | None, cache: JwksCache) -> Any:
    if alg in _HMAC:
        if config.secret is None:
            raise CredentialError("unsupported token algorithm")
        return config.secret.get_secret_value()
    if config.public_key:
        return _public_key(config.public_key)
    if config.jwks_url:
        try:
            return await cache.get_key(config.jwks_url, kid, ttl=config.jwks_cache_seconds)
        except KeyError:
            raise CredentialError("unknown signing key") from None
        except JwksError:
            raise CredentialError("signing keys unavailable") from None
    raise CredentialError("unsupported token algorithm")


async def verify_token(
    token: str, config: JwtAuthConfig, *, cache: JwksCache | None = None
) -> VerifiedToken:
    """Verify signature, ``exp``/``nbf``/``iat``, configured ``iss``/``aud``; map claims."""
    if not token or len(token) > _MAX_TOKEN_LENGTH or token.count(".") != 2:
        raise CredentialError("malformed token")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise CredentialError("malformed token") from None
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in config.allowed_algorithms():
        raise CredentialError("unsupported token algorithm")
    kid = header.get("kid")
    key = await _key_for(config, alg, kid if isinstance(kid, str) else None, cache or jwks_cache)
    required = [config.identity_claim] if config.identity_claim == "sub" else []
    if config.require_exp:
        required.append("exp")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[alg],
            audience=config.audience,
            issuer=config.issuer,
            leeway=config.leeway_seconds,
            options={
                "require": required,
                "verify_aud": config.audience is not None,
                "enforce_minimum_key_length": True,
            },
        )
    except jwt.ExpiredSignatureError:
        raise CredentialError("token expired") from None
    except jwt.ImmatureSignatureError:
        raise CredentialError("token not yet valid") from None
    except jwt.InvalidSignatureError:
        raise CredentialError("invalid signature") from None
    except jwt.InvalidAudienceError:
        raise CredentialError("invalid audience") from None
    except jwt.InvalidIssuerError:
        raise CredentialError("invalid issuer") from None
    except jwt.MissingRequiredClaimError as exc:
        raise CredentialError(f"token missing claim {exc.claim}") from None
    except jwt.InvalidAlgorithmError:
        raise CredentialError("unsupported token algorithm") from None
    except (jwt.InvalidKeyError, jwt.PyJWKError):
        raise CredentialError("invalid signature") from None
    except jwt.PyJWTError:
        raise CredentialError("malformed token") from None
    audiences = claims.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else audiences or []
    if claims.get("iss") == DELEGATION_ISSUER or DELEGATION_AUDIENCE in audiences:
        # A delegation token is never a user's bearer token, whatever the keys.
        raise CredentialError("invalid audience")
    identity = _claim(claims, config.identity_claim)
    if not isinstance(identity, str) or not identity.strip():
        raise CredentialError(f"token missing claim {config.identity_claim}")
    if is_reserved_identity(identity):
        raise CredentialError("reserved identity")
    display = _claim(claims, config.display_name_claim)
    return VerifiedToken(
        identity=identity,
        display_name=display if isinstance(display, str) and display else None,
        roles=_string_list(_claim(claims, config.roles_claim)),
        permissions=_string_list(_claim(claims, config.permissions_claim)),
    )


def mint_token(
    secret: str,
    subject: str,
    *,
    ttl_seconds: int = 3600,
    algorithm: str = "HS256",
    issuer: str | None = None,
    audience: str | None = None,
    extra_claims: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> str:
    """An HS* token for development and tests (production tokens come from an IdP)."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {"sub": subject, "iat": issued, "exp": issued + ttl_seconds}
    if issuer:
        claims["iss"] = issuer
    if audience:
        claims["aud"] = audience
    claims.update(extra_claims or {})
    return jwt.encode(claims, secret, algorithm=algorithm)
