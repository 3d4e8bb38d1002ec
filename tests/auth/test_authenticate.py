"""Authentication through the real in-process server: every bad credential is a 401."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from langgraph_sdk import get_client

from auth.api_keys import hash_api_key
from auth.jwks import jwks_cache
from tests.auth.conftest import OTHER_SECRET, SECRET, bearer, token
from tests.auth.jwks_server import AUDIENCE, KEY_A, KEY_B, JwksServer, sign

pytestmark = pytest.mark.server


async def _status(
    raw: Callable[..., Any], headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    async with raw(headers) as client:
        response = await client.post("/threads/search", json={})
    body = (
        response.json()
        if response.headers.get("content-type", "").startswith("application/json")
        else response.text
    )
    return response.status_code, body


async def test_default_config_is_the_local_user_under_dev(raw: Callable[..., Any]) -> None:
    status, _ = await _status(raw)
    assert status == 200
    async with raw() as client:
        me = (await client.get("/auth/whoami")).json()
    assert me["identity"] == "default" and me["auth_mode"] == "none"


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        (None, "missing bearer token"),
        ({"Authorization": "Bearer not-a-jwt"}, "malformed token"),
        ({"Authorization": "Bearer a.b.c"}, "malformed token"),
        ({"Authorization": "Basic YWxpY2U6c2VjcmV0"}, "malformed authorization header"),
        ({"Authorization": f"Bearer {token('alice', ttl_seconds=-120)}"}, "token expired"),
        ({"Authorization": f"Bearer {token('alice', secret=OTHER_SECRET)}"}, "invalid signature"),
        (
            {
                "Authorization": f"Bearer {token('alice', extra_claims={'nbf': int(time.time()) + 600})}"
            },
            "token not yet valid",
        ),
        ({"Authorization": f"Bearer {token('default')}"}, "reserved identity"),
        ({"Authorization": f"Bearer {token('studio:alice')}"}, "reserved identity"),
        (
            {
                "Authorization": "Bearer "
                + jwt.encode({"sub": "alice", "exp": 2**31}, cast(Any, None), "none")
            },
            "unsupported token algorithm",
        ),
    ],
    ids=[
        "no-token",
        "garbage",
        "bad-segments",
        "wrong-scheme",
        "expired",
        "other-key",
        "not-yet-valid",
        "reserved-default",
        "reserved-studio",
        "alg-none",
    ],
)
async def test_bad_credentials_get_401_with_a_short_reason(
    jwt_mode: Callable[..., Any],
    raw: Callable[..., Any],
    headers: dict[str, str] | None,
    reason: str,
) -> None:
    jwt_mode()
    status, body = await _status(raw, headers)
    assert status == 401
    assert body == {"detail": reason}


async def test_token_without_exp_and_rs256_token_are_refused(
    jwt_mode: Callable[..., Any], raw: Callable[..., Any]
) -> None:
    jwt_mode()
    no_exp = jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256")
    assert await _status(raw, {"Authorization": f"Bearer {no_exp}"}) == (
        401,
        {"detail": "token missing claim exp"},
    )
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rs = jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, private, algorithm="RS256")
    assert await _status(raw, {"Authorization": f"Bearer {rs}"}) == (
        401,
        {"detail": "unsupported token algorithm"},
    )


async def test_issuer_and_audience_are_checked_when_configured(
    jwt_mode: Callable[..., Any], raw: Callable[..., Any]
) -> None:
    jwt_mode(jwt={"secret": SECRET, "issuer": "https://idp.test", "audience": "deerflow"})
    good = bearer("alice", issuer="https://idp.test", audience="deerflow")
    assert (await _status(raw, good))[0] == 200
    wrong_iss = bearer("alice", issuer="https://evil.test", audience="deerflow")
    assert await _status(raw, wrong_iss) == (401, {"detail": "invalid issuer"})
    wrong_aud = bearer("alice", issuer="https://idp.test", audience="other")
    assert await _status(raw, wrong_aud) == (401, {"detail": "invalid audience"})
    no_iss = bearer("alice", audience="deerflow")
    assert await _status(raw, no_iss) == (401, {"detail": "token missing claim iss"})


async def test_valid_token_identity_roles_and_permissions(
    jwt_mode: Callable[..., Any], raw: Callable[..., Any]
) -> None:
    jwt_mode(
        jwt={
            "secret": SECRET,
            "roles_claim": "realm_access.roles",
            "permissions_claim": "scope",
        }
    )
    headers = bearer(
        "alice@example.com",
        extra_claims={
            "name": "Alice",
            "realm_access": {"roles": ["admin", "dev"]},
            "scope": "threads:read threads:write",
        },
    )
    async with raw(headers) as client:
        me = (await client.get("/auth/whoami")).json()
    assert me == {
        "identity": "alice@example.com",
        "user_id": me["user_id"],
        "display_name": "Alice",
        "auth_mode": "jwt",
        "roles": ["admin", "dev"],
        "permissions": ["threads:read", "threads:write"],
        "authorization": {"enabled": False},
    }
    assert me["user_id"].startswith("alice_example_com--")


async def test_custom_routes_are_behind_auth_but_health_is_public(
    jwt_mode: Callable[..., Any], raw: Callable[..., Any]
) -> None:
    jwt_mode()
    async with raw() as client:
        assert (await client.get("/health")).status_code == 200
        whoami = await client.get("/auth/whoami")
        assert whoami.status_code == 401
        assert whoami.json() == {"detail": "missing bearer token"}
        assert (await client.get("/ok")).status_code == 200


async def test_api_key_mode(
    configure: Callable[..., Any], raw: Callable[..., Any], lg_client: Callable[..., Any]
) -> None:
    key = "dfk_test-key-for-alice-0123456789abcdef"
    configure(
        auth={
            "mode": "api_key",
            "api_keys": [
                {"identity": "bob", "sha256": hash_api_key("dfk_bobs-key-0123456789")},
                {"identity": "alice", "sha256": hash_api_key(key), "roles": ["ops"]},
            ],
        }
    )
    assert await _status(raw) == (401, {"detail": "missing API key"})
    assert await _status(raw, {"x-api-key": key + "x"}) == (401, {"detail": "invalid API key"})
    assert await _status(raw, {"x-api-key": key.upper()}) == (401, {"detail": "invalid API key"})
    for headers in ({"x-api-key": key}, {"Authorization": f"Bearer {key}"}):
        async with raw(headers) as client:
            me = (await client.get("/auth/whoami")).json()
        assert (me["identity"], me["auth_mode"], me["roles"]) == ("alice", "api_key", ["ops"])
    # langgraph_sdk's api_key= sends x-api-key.
    sent = dict(get_client(url="http://deerflow.test", api_key=key).http.client.headers)
    thread = await lg_client(headers={"x-api-key": sent["x-api-key"]}).threads.create()
    assert thread["metadata"]["owner"] == "alice"
    # A JWT is not an API key.
    assert await _status(raw, bearer("alice")) == (401, {"detail": "invalid API key"})


async def test_openapi_declares_the_security_schemes(raw: Callable[..., Any]) -> None:
    async with raw() as client:
        spec = (await client.get("/openapi.json")).json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["BearerAuth"]["scheme"] == "bearer"
    assert schemes["ApiKeyAuth"]["name"] == "x-api-key"
    assert {"BearerAuth": []} in spec["security"]


async def test_jwks_keys_through_the_server(
    configure: Callable[..., Any], raw: Callable[..., Any]
) -> None:
    jwks_cache.clear()
    with JwksServer() as jwks:
        configure(
            auth={"jwt": {"jwks_url": jwks.url, "issuer": "https://idp.test", "audience": AUDIENCE}}
        )
        now = int(time.time())
        good = jwt.encode(
            {"sub": "erin", "iss": "https://idp.test", "exp": now + 60, "aud": AUDIENCE},
            KEY_A,
            "RS256",
            headers={"kid": "a"},
        )
        async with raw({"Authorization": f"Bearer {good}"}) as client:
            me = (await client.get("/auth/whoami")).json()
        assert (me["identity"], me["auth_mode"]) == ("erin", "jwt")
        assert await _status(raw, {"Authorization": f"Bearer {sign(KEY_B, 'b')}"}) == (
            401,
            {"detail": "unknown signing key"},
        )
    jwks_cache.clear()
