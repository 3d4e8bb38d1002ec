"""Secret-looking environment variables never reach a command."""

from __future__ import annotations

import pytest

from sandbox.env import filter_env, looks_secret


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
