"""Delegation tokens: what a remote subagent run authenticates with."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from langgraph_sdk import Auth

from auth.authenticate import authenticate_request
from subagents.credentials import (
    DELEGATION_AUDIENCE,
    DELEGATION_ISSUER,
    DELEGATION_SCHEME,
    SECRET_ENV,
    DelegationTokenError,
    authenticate_delegation,
    delegation_header,
    mint_delegation_token,
    verify_delegation_token,
)
from tests.support.scripted import ai_text, write_config

T1 = str(uuid.uuid4())
T2 = str(uuid.uuid4())
SHARED = "d" * 40


def mint(identity: str = "alice", **kwargs: Any) -> str:
    kwargs.setdefault("thread_ids", [T1])
    kwargs.setdefault("ttl_seconds", 60)
    return mint_delegation_token(identity, **kwargs)


def test_round_trip_is_a_jwt_with_audience_issuer_expiry_and_id() -> None:
    token = mint(permissions=["read"], parent_thread_id="t", parent_run_id="r")
    user = verify_delegation_token(token)
    assert (user.identity, user.permissions, user.parent_thread_id, user.parent_run_id) == (
        "alice",
        ("read",),
        "t",
        "r",
    )
    assert user.thread_ids == {T1}
    claims = jwt.decode(token, options={"verify_signature": False})
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    assert claims["aud"] == DELEGATION_AUDIENCE and claims["iss"] == DELEGATION_ISSUER
    assert claims["exp"] - claims["iat"] == 60 and len(claims["jti"]) == 32
    assert claims["threads"] == [T1]
    assert user.token_id == claims["jti"]
    assert mint().split(".")[1] != token.split(".")[1]  # fresh jti each time


def test_expired_tampered_and_malformed_tokens_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, SHARED)
    token = mint(ttl_seconds=10, now=1000.0)
    with pytest.raises(DelegationTokenError, match="expired"):
        verify_delegation_token(token, now=1010.0)
    header, _body, signature = token.split(".")
    forged = mint("mallory", ttl_seconds=10, now=1000.0).split(".")[1]
    with pytest.raises(DelegationTokenError, match="signature"):
        verify_delegation_token(f"{header}.{forged}.{signature}", now=1001.0)
    for bad in ["", "abc", "dfd1.a.b.c", "jwt.a.b", "x" * 5000]:
        with pytest.raises(DelegationTokenError):
            verify_delegation_token(bad)
    base = {"sub": "alice", "iat": 1000, "exp": 1060, "jti": "j", "threads": [T1]}
    for claims, reason in (
        ({**base, "aud": "other", "iss": DELEGATION_ISSUER}, "not a delegation token"),
        ({**base, "aud": DELEGATION_AUDIENCE, "iss": "idp"}, "not a delegation token"),
        ({**base, "iss": DELEGATION_ISSUER}, "malformed"),  # no aud
        ({**base, "aud": DELEGATION_AUDIENCE, "iss": DELEGATION_ISSUER, "threads": []}, "thread"),
        (
            {**base, "aud": DELEGATION_AUDIENCE, "iss": DELEGATION_ISSUER, "exp": 1000 + 10**6},
            "lifetime",
        ),
    ):
        with pytest.raises(DelegationTokenError, match=reason):
            verify_delegation_token(jwt.encode(claims, SHARED, algorithm="HS256"), now=1001.0)
    unsigned = jwt.encode(
        {**base, "aud": DELEGATION_AUDIENCE, "iss": DELEGATION_ISSUER}, "", algorithm="none"
    )
    with pytest.raises(DelegationTokenError, match="malformed"):
        verify_delegation_token(unsigned, now=1001.0)


def test_reserved_identities_are_refused_unless_the_server_delegates_for_them() -> None:
    for identity in ("default", "studio:langgraph-studio-user", "a_b--" + "0" * 32):
        with pytest.raises(DelegationTokenError, match="reserved identity"):
            verify_delegation_token(mint(identity))
    allowed = verify_delegation_token(mint("default"), allow_reserved=lambda i: i == "default")
    assert allowed.identity == "default"


def test_a_token_is_bound_to_thread_ids() -> None:
    with pytest.raises(ValueError):
        mint(thread_ids=[])
    with pytest.raises(ValueError):
        mint(thread_ids=["not-a-uuid"])
    assert verify_delegation_token(mint(thread_ids=[T1.upper(), T2])).thread_ids == {T1, T2}


def test_a_token_from_another_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    token = mint()
    monkeypatch.setenv(SECRET_ENV, "k" * 40)
    with pytest.raises(DelegationTokenError, match="signature"):
        verify_delegation_token(token)
    shared = mint()
    assert verify_delegation_token(shared).identity == "alice"
    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(DelegationTokenError, match="at least 32 bytes"):
        mint()


def test_header_helpers() -> None:
    token = mint("bob")
    header = delegation_header(token)["Authorization"]
    assert header.startswith(f"{DELEGATION_SCHEME} ")
    user = authenticate_delegation(header)
    assert user is not None and user.identity == "bob"
    assert authenticate_delegation(None) is None
    assert authenticate_delegation("Bearer abc") is None
    with pytest.raises(DelegationTokenError):
        authenticate_delegation(f"{DELEGATION_SCHEME} forged")
    with pytest.raises(ValueError):
        mint_delegation_token("", thread_ids=[T1], ttl_seconds=1)


@pytest.fixture
def jwt_config(tmp_path: Path, use_config: Callable[[Path], Path]) -> None:
    use_config(
        write_config(tmp_path, [ai_text("x")], auth={"mode": "jwt", "jwt": {"secret": "j" * 40}})
    )


async def test_the_auth_handler_accepts_delegation_tokens(jwt_config: None) -> None:
    token = mint(roles=["analyst"], permissions=["p"], parent_thread_id="t")
    user = await authenticate_request(
        authorization=f"{DELEGATION_SCHEME} {token}", headers={}, path="/threads", method="POST"
    )
    assert user["identity"] == "alice"
    assert user["roles"] == ["analyst"]
    assert user["permissions"] == ["p"]
    assert user["delegated_subagent"] is True
    assert user["parent_thread_id"] == "t"
    assert user["delegated_threads"] == [T1]
    for bad in (f"{DELEGATION_SCHEME} nope", f"{DELEGATION_SCHEME} {token[:-3]}abc"):
        with pytest.raises(Auth.exceptions.HTTPException) as refused:
            await authenticate_request(
                authorization=bad, headers={}, path="/threads", method="POST"
            )
        assert refused.value.status_code == 401


async def test_mode_none_outside_dev_refuses_even_delegation_tokens(
    tmp_path: Path, use_config: Callable[[Path], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_config(write_config(tmp_path, [ai_text("x")], auth={"mode": "none"}))
    monkeypatch.setenv("LANGSMITH_LANGGRAPH_API_VARIANT", "production")
    token = mint()
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        await authenticate_request(
            authorization=f"{DELEGATION_SCHEME} {token}", headers={}, path="/threads", method="POST"
        )
    assert refused.value.status_code == 403


@pytest.mark.parametrize(
    "token",
    ["a.\u00e9.x", "eyJ.abc.\u00e9\u00e9", "a.a b.c", "..", "YQ.YQ.YQ=="],
)
def test_non_base64url_tokens_are_malformed_not_crashes(token: str) -> None:
    with pytest.raises(DelegationTokenError, match="malformed"):
        verify_delegation_token(token)


async def status_of(call: Any) -> int:
    try:
        await call
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return 200


async def test_a_delegation_token_acts_on_its_own_thread_only(
    jwt_config: None, lg_client: Callable[..., Any]
) -> None:
    """It leaves the process in remote mode, so it never grants the user's whole API."""
    alice = lg_client(headers={"Authorization": f"Bearer {_alice_token()}"})
    hers = await alice.threads.create()
    token = mint(parent_thread_id=hers["thread_id"])
    delegated = lg_client(headers=delegation_header(token))
    thread = await delegated.threads.create(thread_id=T1)
    assert thread["metadata"]["owner"] == "alice"
    assert await delegated.threads.get(T1)
    await delegated.runs.wait(
        T1, "subagent", input={"messages": [{"role": "user", "content": "x"}]}
    )
    assert (await delegated.threads.get_state(T1))["values"]["messages"]
    assert [t["thread_id"] for t in await delegated.threads.search()] == [T1]
    assert len(await delegated.runs.list(T1)) == 1
    # Alice's own client still sees the child: it is her thread.
    assert (await alice.threads.get(T1))["thread_id"] == T1
    refused = {
        "another thread id": delegated.threads.create(thread_id=T2),
        "a random thread id": delegated.threads.create(),
        "the parent thread": delegated.threads.get(hers["thread_id"]),
        "the parent's state": delegated.threads.get_state(hers["thread_id"]),
        "a run on the parent": delegated.runs.create(hers["thread_id"], "subagent", input={}),
        "a stateless run": delegated.runs.wait(None, "subagent", input={}),
        "a state patch": delegated.threads.update_state(T1, {"messages": []}),
        "a metadata patch": delegated.threads.update(T1, metadata={"x": 1}),
        "a copy": delegated.threads.copy(T1),
        "a delete": delegated.threads.delete(T1),
        "the store": delegated.store.put_item(("notes",), "k", {"v": 1}),
        "a store search": delegated.store.search_items(("notes",)),
        "crons": delegated.crons.create("lead_agent", schedule="* * * * *", input={}),
        "assistants": delegated.assistants.create("lead_agent"),
        "uploads": delegated.http.get(f"/threads/{T1}/uploads"),
    }
    statuses = {name: await status_of(call) for name, call in refused.items()}
    assert all(status == 403 for status in statuses.values()), statuses


def _alice_token() -> str:
    from auth.tokens import mint_token

    return mint_token("j" * 40, "alice")


async def test_a_delegation_token_is_not_a_bearer_token_and_vice_versa(
    tmp_path: Path, use_config: Callable[[Path], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even when an operator uses one secret for both (the audience keeps them apart)."""
    use_config(
        write_config(tmp_path, [ai_text("x")], auth={"mode": "jwt", "jwt": {"secret": SHARED}})
    )
    monkeypatch.setenv(SECRET_ENV, SHARED)
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        await authenticate_request(
            authorization=f"Bearer {mint()}", headers={}, path="/threads", method="POST"
        )
    assert (refused.value.status_code, refused.value.detail) == (401, "invalid audience")
    from auth.tokens import mint_token

    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        await authenticate_request(
            authorization=f"{DELEGATION_SCHEME} {mint_token(SHARED, 'alice')}",
            headers={},
            path="/threads",
            method="POST",
        )
    assert refused.value.status_code == 401


async def test_reserved_identities_follow_the_auth_mode(
    tmp_path: Path, use_config: Callable[[Path], Path]
) -> None:
    async def status(identity: str) -> int:
        try:
            await authenticate_request(
                authorization=f"{DELEGATION_SCHEME} {mint(identity)}",
                headers={},
                path="/threads",
                method="POST",
            )
        except Auth.exceptions.HTTPException as exc:
            return exc.status_code
        return 200

    jwt = {"mode": "jwt", "jwt": {"secret": "j" * 40}}
    use_config(write_config(tmp_path, [ai_text("x")], auth=jwt))
    assert await status("default") == 401
    assert await status("studio:langgraph-studio-user") == 401
    use_config(write_config(tmp_path, [ai_text("x")], auth={**jwt, "studio": "isolated"}))
    assert await status("studio:langgraph-studio-user") == 200
    assert await status("default") == 401
    use_config(write_config(tmp_path, [ai_text("x")], auth={"mode": "none"}))
    assert await status("default") == 200
