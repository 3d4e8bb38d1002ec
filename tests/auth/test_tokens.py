"""``verify_token``: keys, algorithms, time claims, issuer/audience, claim mapping."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any, cast

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.utils import base64url_encode

from auth.tokens import CredentialError, mint_token, verify_token
from runtime.config import JwtAuthConfig
from tests.auth.conftest import OTHER_SECRET, SECRET

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def pem(private: Any) -> str:
    return (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def hs256_signed_with(key: bytes, payload: dict[str, Any]) -> str:
    """An HS256 token built by hand (PyJWT refuses to use a PEM as an HMAC key)."""
    segments = [base64url_encode(json.dumps(part).encode()) for part in ({"alg": "HS256"}, payload)]
    signing_input = b".".join(segments)
    signature = base64url_encode(hmac.new(key, signing_input, hashlib.sha256).digest())
    return b".".join([signing_input, signature]).decode()


def claims(sub: str = "alice", **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": sub, "iat": now, "exp": now + 300, **extra}


def jwt_config(**settings: Any) -> JwtAuthConfig:
    return JwtAuthConfig.model_validate(settings)


async def reason(token: str, config: JwtAuthConfig) -> str:
    with pytest.raises(CredentialError) as refused:
        await verify_token(token, config)
    return refused.value.reason


async def test_hs256_roles_permissions_and_display_name() -> None:
    config = jwt_config(secret=SECRET, roles_claim="realm_access.roles")
    token = jwt.encode(
        claims(name="Alice", realm_access={"roles": ["admin"]}, permissions=["a", "b"]), SECRET
    )
    verified = await verify_token(token, config)
    assert verified.identity == "alice"
    assert verified.display_name == "Alice"
    assert verified.roles == ["admin"]
    assert verified.permissions == ["a", "b"]


async def test_time_claims_with_leeway() -> None:
    config = jwt_config(secret=SECRET, leeway_seconds=30)
    now = int(time.time())
    recently_expired = jwt.encode({"sub": "a", "exp": now - 10}, SECRET)
    assert (await verify_token(recently_expired, config)).identity == "a"
    expired = jwt.encode({"sub": "a", "exp": now - 120}, SECRET)
    assert await reason(expired, config) == "token expired"
    future_nbf = jwt.encode({"sub": "a", "exp": now + 600, "nbf": now + 300}, SECRET)
    assert await reason(future_nbf, config) == "token not yet valid"
    future_iat = jwt.encode({"sub": "a", "exp": now + 600, "iat": now + 300}, SECRET)
    assert await reason(future_iat, config) == "token not yet valid"
    no_exp = jwt.encode({"sub": "a"}, SECRET)
    assert await reason(no_exp, config) == "token missing claim exp"
    assert (await verify_token(no_exp, jwt_config(secret=SECRET, require_exp=False))).identity


async def test_signature_and_algorithm_checks() -> None:
    config = jwt_config(secret=SECRET)
    assert await reason(jwt.encode(claims(), OTHER_SECRET), config) == "invalid signature"
    assert await reason(jwt.encode(claims(), SECRET * 2, "HS512"), config) == (
        "unsupported token algorithm"
    )
    assert (
        await reason(jwt.encode(claims(), cast(Any, None), "none"), config)
        == "unsupported token algorithm"
    )
    rs = jwt.encode(claims(), RSA_KEY, "RS256")
    assert await reason(rs, config) == "unsupported token algorithm"
    # Tampered payload with the original signature.
    header, _, signature = jwt.encode(claims(), SECRET).split(".")
    forged_payload = jwt.encode(claims(sub="admin"), SECRET).split(".")[1]
    assert await reason(f"{header}.{forged_payload}.{signature}", config) == "invalid signature"
    for garbage in ("", "abc", "a.b.c", "a.b", "x" * 20000):
        assert await reason(garbage, config) == "malformed token"


async def test_public_keys_rs256_and_es256() -> None:
    rsa_config = jwt_config(public_key=pem(RSA_KEY), audience="api")
    assert (
        await verify_token(jwt.encode(claims(aud="api"), RSA_KEY, "RS256"), rsa_config)
    ).identity
    # Another application's token from the same identity provider is refused.
    foreign = jwt.encode(claims(aud="other-app"), RSA_KEY, "RS256")
    assert await reason(foreign, rsa_config) == "invalid audience"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert (
        await reason(jwt.encode(claims(aud="api"), other, "RS256"), rsa_config)
        == "invalid signature"
    )
    # HS256 signed with the public key text (the classic confusion attack) is refused.
    confused = hs256_signed_with(pem(RSA_KEY).encode(), {"sub": "admin", "exp": 9999999999})
    assert await reason(confused, rsa_config) == "unsupported token algorithm"
    ec_config = jwt_config(public_key=pem(EC_KEY), audience="api")
    assert (await verify_token(jwt.encode(claims(aud="api"), EC_KEY, "ES256"), ec_config)).identity


async def test_issuer_audience_and_identity_claim() -> None:
    config = jwt_config(secret=SECRET, issuer="https://idp", audience=["api", "cli"])
    assert await verify_token(jwt.encode(claims(iss="https://idp", aud="cli"), SECRET), config)
    assert await reason(jwt.encode(claims(iss="https://x", aud="api"), SECRET), config) == (
        "invalid issuer"
    )
    assert await reason(jwt.encode(claims(iss="https://idp", aud="web"), SECRET), config) == (
        "invalid audience"
    )
    assert await reason(jwt.encode(claims(iss="https://idp"), SECRET), config) == (
        "token missing claim aud"
    )
    # Without a configured audience, a token's aud is not checked.
    open_config = jwt_config(secret=SECRET)
    assert (await verify_token(jwt.encode(claims(aud="anything"), SECRET), open_config)).identity
    email = jwt_config(secret=SECRET, identity_claim="email")
    token = jwt.encode(claims(email="carol@example.com"), SECRET)
    assert (await verify_token(token, email)).identity == "carol@example.com"
    assert await reason(jwt.encode(claims(), SECRET), email) == "token missing claim email"
    assert await reason(jwt.encode(claims(sub=""), SECRET), open_config) in {
        "malformed token",
        "token missing claim sub",
    }
    assert await reason(jwt.encode(claims(sub="default"), SECRET), open_config) == (
        "reserved identity"
    )


async def test_mint_token_round_trip() -> None:
    config = jwt_config(secret=SECRET, issuer="iss", audience=["aud"])
    token = mint_token(SECRET, "dave", issuer="iss", audience="aud", ttl_seconds=60)
    assert (await verify_token(token, config)).identity == "dave"
