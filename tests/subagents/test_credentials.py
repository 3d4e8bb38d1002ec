"""Delegation tokens: what a remote subagent run authenticates with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import Auth

from auth.authenticate import authenticate_request
from subagents.credentials import (
    DELEGATION_SCHEME,
    SECRET_ENV,
    DelegationTokenError,
    authenticate_delegation,
    delegation_header,
    mint_delegation_token,
    verify_delegation_token,
)
from tests.support.scripted import ai_text, write_config


def test_round_trip() -> None:
    token = mint_delegation_token(
        "alice", ttl_seconds=60, permissions=["read"], parent_thread_id="t", parent_run_id="r"
    )
    user = verify_delegation_token(token)
    assert (user.identity, user.permissions, user.parent_thread_id, user.parent_run_id) == (
        "alice",
        ("read",),
        "t",
        "r",
    )
    result = user.as_auth_result()
    assert result["identity"] == "alice"
    assert result["is_delegated_subagent"] is True


def test_expired_tampered_and_malformed_tokens_are_refused() -> None:
    token = mint_delegation_token("alice", ttl_seconds=10, now=1000.0)
    with pytest.raises(DelegationTokenError, match="expired"):
        verify_delegation_token(token, now=1010.0)
    prefix, _body, signature = token.split(".")
    forged = mint_delegation_token("mallory", ttl_seconds=10, now=1000.0).split(".")[1]
    with pytest.raises(DelegationTokenError, match="signature"):
        verify_delegation_token(f"{prefix}.{forged}.{signature}", now=1001.0)
    for bad in ["", "abc", "dfd1.a.b.c", "jwt.a.b", "dfd1." + "x" * 5000 + ".y"]:
        with pytest.raises(DelegationTokenError):
            verify_delegation_token(bad)


def test_a_token_from_another_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    token = mint_delegation_token("alice", ttl_seconds=60)
    monkeypatch.setenv(SECRET_ENV, "k" * 40)
    with pytest.raises(DelegationTokenError, match="signature"):
        verify_delegation_token(token)
    shared = mint_delegation_token("alice", ttl_seconds=60)
    assert verify_delegation_token(shared).identity == "alice"
    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(DelegationTokenError, match="at least 32 bytes"):
        mint_delegation_token("alice", ttl_seconds=60)


def test_header_helpers() -> None:
    token = mint_delegation_token("bob", ttl_seconds=60)
    header = delegation_header(token)["Authorization"]
    assert header.startswith(f"{DELEGATION_SCHEME} ")
    user = authenticate_delegation(header)
    assert user is not None and user.identity == "bob"
    assert authenticate_delegation(None) is None
    assert authenticate_delegation("Bearer abc") is None
    with pytest.raises(DelegationTokenError):
        authenticate_delegation(f"{DELEGATION_SCHEME} forged")
    with pytest.raises(ValueError):
        mint_delegation_token("", ttl_seconds=1)


@pytest.fixture
def jwt_config(tmp_path: Path, use_config: Callable[[Path], Path]) -> None:
    use_config(
        write_config(tmp_path, [ai_text("x")], auth={"mode": "jwt", "jwt": {"secret": "j" * 40}})
    )


async def test_the_auth_handler_accepts_delegation_tokens(jwt_config: None) -> None:
    token = mint_delegation_token(
        "alice", ttl_seconds=60, roles=["analyst"], permissions=["p"], parent_thread_id="t"
    )
    user = await authenticate_request(
        authorization=f"{DELEGATION_SCHEME} {token}", headers={}, path="/threads", method="POST"
    )
    assert user["identity"] == "alice"
    assert user["roles"] == ["analyst"]
    assert user["permissions"] == ["p"]
    assert user["delegated_subagent"] is True
    assert user["parent_thread_id"] == "t"
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
    token = mint_delegation_token("alice", ttl_seconds=60)
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        await authenticate_request(
            authorization=f"{DELEGATION_SCHEME} {token}", headers={}, path="/threads", method="POST"
        )
    assert refused.value.status_code == 403


@pytest.mark.parametrize(
    "token",
    ["dfd1.\u00e9.x", "dfd1.abc.\u00e9\u00e9", "dfd1.a b.c", "dfd1..", "dfd1.YQ.YQ=="],
)
def test_non_base64url_tokens_are_malformed_not_crashes(token: str) -> None:
    with pytest.raises(DelegationTokenError, match="malformed"):
        verify_delegation_token(token)


async def test_a_delegation_token_only_runs_and_reads_threads(
    jwt_config: None, lg_client: Callable[..., Any]
) -> None:
    """It leaves the process in remote mode, so it never grants the user's whole API."""
    token = mint_delegation_token("alice", ttl_seconds=60, parent_thread_id="t")
    delegated = lg_client(headers=delegation_header(token))
    thread = await delegated.threads.create()
    assert await delegated.threads.get(thread["thread_id"])
    assert thread["thread_id"] in [t["thread_id"] for t in await delegated.threads.search()]
    refused = (
        delegated.threads.delete(thread["thread_id"]),
        delegated.store.put_item(("notes",), "k", {"v": 1}),
        delegated.store.search_items(("notes",)),
        delegated.crons.create("lead_agent", schedule="* * * * *", input={"messages": []}),
        delegated.assistants.create("lead_agent"),
    )
    for call in refused:
        with pytest.raises(Exception, match=r"403|delegation token"):
            await call
