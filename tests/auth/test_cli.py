"""``python -m auth``: minting dev tokens and API keys that the server then accepts."""

from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from auth.__main__ import main
from auth.api_keys import match_api_key
from auth.tokens import verify_token
from runtime.config import ApiKeyEntry, ConfigError, load_settings
from tests.auth.conftest import SECRET
from tests.support.scripted import ai_text, write_config
from tests.support.server import project_copy


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
    block = yaml.safe_load(out)  # the whole output pastes as YAML (the key is a comment)
    entry = block["auth"]["api_keys"][0]
    assert key.group(1) not in str(block)  # config gets the hash only
    found = match_api_key(key.group(1), [ApiKeyEntry(**entry)])
    assert found is not None and found.identity == "svc-report"
    monkeypatch.setattr("sys.stdin", io.StringIO(key.group(1) + "\n"))
    assert main(["hash-api-key"]) == 0
    assert capsys.readouterr().out.strip() == entry["sha256"]


# --- the first hour (issue 22 item 4) ------------------------------------------


def test_new_api_key_prints_a_block_that_pastes_into_config_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["new-api-key", "--identity", "svc-report", "--roles", "reader, writer"]
    assert main([*argv, "--display-name", "Report service"]) == 0
    out = capsys.readouterr().out
    key = re.search(r"\): (dfk_\S+)", out)
    assert key is not None
    config = tmp_path / "config.yaml"
    models = yaml.safe_dump(
        {"models": [{"name": "m", "use": "runtime.scripted_model:ScriptedChatModel"}]}
    )
    config.write_text(models + out)  # pasted as printed, no re-indenting
    monkeypatch.setenv("DEERFLOW_CONFIG", str(config))
    auth = load_settings().auth
    assert auth.effective_mode == "api_key"
    found = match_api_key(key.group(1), auth.api_keys)
    assert found is not None
    assert (found.identity, found.roles, found.display_name) == (
        "svc-report",
        ["reader", "writer"],
        "Report service",
    )


def test_every_error_line_ends_with_a_newline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DEERFLOW_AUTH_JWT_SECRET", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    for argv in (["mint-token", "--sub", "alice"], ["new-api-key", "--identity", "default"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err and err.endswith("\n"), argv
    assert main(["hash-api-key"]) == 2
    assert capsys.readouterr().err.endswith("\n")


def test_api_keys_never_leave_the_server_open(tmp_path: Path) -> None:
    entry = {"identity": "svc", "sha256": "a" * 64}
    implicit = write_config(tmp_path, [ai_text("x")], auth={"api_keys": [entry]})
    assert load_settings(implicit).auth.effective_mode == "api_key"
    explicit = write_config(
        tmp_path, [ai_text("x")], auth={"mode": "none", "api_keys": [entry]}, filename="b.yaml"
    )
    with pytest.raises(ConfigError, match="api_keys are configured but mode is none"):
        load_settings(explicit)


SHELL_SECRET = "shell-secret-" + "s" * 40
DOTENV_SECRET = "dotenv-secret-" + "d" * 40


async def test_mint_token_with_the_secret_only_in_dotenv_is_accepted_by_make_dev(
    tmp_path: Path, dev_server: Any
) -> None:
    """The README's path, literally: the secret in ``.env`` only, then
    ``python -m auth mint-token``; the dev server (which loads ``.env`` over the
    shell's environment) accepts the token. A different value in the shell shows
    that the command applies ``.env`` with the server's precedence."""
    # Blocking file work off the loop (the in-process server's blockbuster is process-wide).
    project = await asyncio.to_thread(project_copy, tmp_path / "project")
    await asyncio.to_thread(
        (project / ".env").write_text, f"DEERFLOW_AUTH_JWT_SECRET={DOTENV_SECRET}\n"
    )
    env = {
        "DEERFLOW_AUTH_JWT_SECRET": SHELL_SECRET,
        "DEERFLOW_CONFIG": "",
        "PYTHONPATH": str(project),
    }
    server = dev_server(env=env, project_root=project, watch_project=True, load_env=True)

    def mint() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "auth", "mint-token", "--sub", "alice"],
            cwd=project,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    minted = await asyncio.to_thread(mint)
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        refused = await http.post("/threads/search", json={})
        assert refused.status_code == 401
        accepted = await http.post(
            "/threads/search", json={}, headers={"Authorization": f"Bearer {token}"}
        )
        assert accepted.status_code == 200, accepted.text
