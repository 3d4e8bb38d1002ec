"""Secret-looking environment variables never reach a command."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.env import filter_env, looks_secret
from sandbox.local import LocalSandboxProvider


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "api_key",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "PGPASSWORD",
        "DB_PASS",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE_KEY_PATH",
        "DEERFLOW_POSTGRES_URI",
        "DATABASE_URI",
        "REDIS_URI",
        "SENTRY_DSN",
        "DATABASE_URL",
        "KEYCLOAK_URL",
    ],
)
def test_secret_names(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "PYTHONPATH", "TERM", "TZ", "USER"])
def test_ordinary_names(name: str) -> None:
    assert not looks_secret(name)


def test_filter_env_merges_sources_and_drops_secrets_and_junk() -> None:
    merged = filter_env(
        {"PATH": "/bin", "MY_TOKEN": "t", "LANG": "C"},
        {"LANG": "C.UTF-8", "EXTRA_SECRET": "s", "MODE": "dev", "BAD=NAME": "x", "NUL": "a\x00b"},
        None,
        extra_patterns=["MODE"],
    )
    assert merged == {"PATH": "/bin", "LANG": "C.UTF-8"}
    assert filter_env({"X": 1}) == {}  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ANALYTICS_DB_URL", "postgres://app:s3cret@db.internal:5432/analytics"),
        ("REDIS_URL", "redis://:hunter2@cache:6379/0"),
        ("WEBHOOK_URL", "https://ghp_token123@hooks.example.com/x"),
        ("HTTPS_PROXY", "http://user:pw@proxy.corp:3128"),
        ("SOME_ENDPOINT", "amqp://guest:guest@mq//"),
    ],
)
def test_credentials_in_url_values_are_withheld(name: str, value: str) -> None:
    """21.6: a ``*_URL`` (or any) value with user-info never reaches a command."""
    assert not looks_secret(name)
    assert filter_env({name: value, "KEEP": "1"}) == {"KEEP": "1"}


@pytest.mark.parametrize(
    "value",
    ["https://example.com/path@v2", "http://localhost:8000", "mailto:a@b.c", "user@host", "a@b"],
)
def test_urls_without_credentials_pass(value: str) -> None:
    assert filter_env({"SERVICE_URL": value}) == {"SERVICE_URL": value}


async def test_url_credentials_never_reach_a_local_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANALYTICS_DB_URL", "postgres://app:s3cret@db.internal/analytics")
    for mode in ({}, {"isolation": "off", "auth_mode": "none"}):
        provider = LocalSandboxProvider(tmp_path / str(len(mode)), **mode)  # type: ignore[arg-type]
        sandbox = provider.get(await provider.acquire("t", user_id="u"))
        assert sandbox is not None
        result = await sandbox.execute_command(
            "env", env={"EXTRA_URL": "https://tok@api.example.com", "PLAIN_URL": "https://ok.test"}
        )
        assert "s3cret" not in result.output and "tok@" not in result.output
        assert "PLAIN_URL=https://ok.test" in result.output
