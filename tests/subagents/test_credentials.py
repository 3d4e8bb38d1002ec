"""Delegation tokens: what a remote subagent run authenticates with."""

from __future__ import annotations

import pytest

from subagents.credentials import (
    DELEGATION_SCHEME,
    SECRET_ENV,
    DelegationTokenError,
    authenticate_delegation,
    delegation_header,
    mint_delegation_token,
    verify_delegation_token,
)


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
