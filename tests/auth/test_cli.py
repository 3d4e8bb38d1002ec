"""``python -m auth``: minting dev tokens and API keys that the server then accepts."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml

from auth.__main__ import main
from auth.api_keys import match_api_key
from auth.tokens import verify_token
from runtime.config import ApiKeyEntry, load_settings
from tests.auth.conftest import SECRET
from tests.support.scripted import ai_text, write_config


async def test_mint_token_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path, [ai_text("x")], auth={"jwt": {"issuer": "https://dev", "audience": "deerflow"}}
    )
    monkeypatch.setenv("DEERFLOW_CONFIG", str(config))
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_SECRET", SECRET)
    assert main(["mint-token", "--sub", "alice", "--roles", "a,b", "--name", "Alice"]) == 0
    token = capsys.readouterr().out.strip()
    verified = await verify_token(token, load_settings().auth.jwt)
    assert (verified.identity, verified.roles, verified.display_name) == (
        "alice",
        ["a", "b"],
        "Alice",
    )


def test_mint_token_refuses_without_secret_or_for_reserved_ids(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DEERFLOW_AUTH_JWT_SECRET", raising=False)
    assert main(["mint-token", "--sub", "alice"]) == 2
    assert "DEERFLOW_AUTH_JWT_SECRET" in capsys.readouterr().err
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_SECRET", SECRET)
    assert main(["mint-token", "--sub", "default"]) == 2
    assert "reserved" in capsys.readouterr().err


def test_new_api_key_prints_a_key_and_its_config_entry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new-api-key", "--identity", "svc-report"]) == 0
    out = capsys.readouterr().out
    key = re.search(r"\): (dfk_\S+)", out)
    assert key is not None
    entry = yaml.safe_load(out.split("auth.api_keys:\n", 1)[1])[0]
    assert key.group(1) not in out.split("auth.api_keys:\n", 1)[1]  # config gets the hash only
    found = match_api_key(key.group(1), [ApiKeyEntry(**entry)])
    assert found is not None and found.identity == "svc-report"
    monkeypatch.setattr("sys.stdin", io.StringIO(key.group(1) + "\n"))
    assert main(["hash-api-key"]) == 0
    assert capsys.readouterr().out.strip() == entry["sha256"]
