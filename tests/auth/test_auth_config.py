"""The ``auth`` config section: mode resolution, validation, environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from auth.api_keys import hash_api_key
from runtime.config import AuthConfig, ConfigError, load_settings
from tests.auth.conftest import SECRET
from tests.support.scripted import ai_text, write_config

PEM = (
    rsa.generate_private_key(public_exponent=65537, key_size=2048)
    .public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


def load(tmp_path: Path, auth: dict[str, Any] | None = None) -> AuthConfig:
    if auth is None:
        return load_settings(write_config(tmp_path, [ai_text("x")])).auth
    return load_settings(write_config(tmp_path, [ai_text("x")], auth=auth)).auth


def error(tmp_path: Path, auth: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as failed:
        load(tmp_path, auth)
    return str(failed.value)


@pytest.fixture(autouse=True)
def _clean_auth_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEERFLOW_AUTH_MODE", raising=False)
    monkeypatch.delenv("DEERFLOW_AUTH_JWT_SECRET", raising=False)
    monkeypatch.delenv("DEERFLOW_AUTH_JWKS_URL", raising=False)


def test_defaults_are_mode_none_with_studio_as_the_local_user(tmp_path: Path) -> None:
    config = load(tmp_path)
    assert (config.effective_mode, config.studio_policy) == ("none", "local")


def test_jwt_secret_env_alone_selects_jwt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_SECRET", SECRET)
    config = load(tmp_path)
    assert config.effective_mode == "jwt" and config.studio_policy == "deny"
    assert config.jwt.secret is not None and config.jwt.secret.get_secret_value() == SECRET
    assert SECRET not in repr(config)  # never printed
    assert config.jwt.allowed_algorithms() == ["HS256"]


def test_jwks_url_env_selects_jwt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEERFLOW_AUTH_JWKS_URL", "https://idp.test/.well-known/jwks.json")
    with pytest.raises(ConfigError, match=r"jwt\.audience is required"):
        load(tmp_path)
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_AUDIENCE", "deerflow-api")
    config = load(tmp_path)
    assert config.jwt.audience == ["deerflow-api"]
    assert config.effective_mode == "jwt"
    assert config.jwt.jwks_url == "https://idp.test/.well-known/jwks.json"
    assert config.jwt.allowed_algorithms() == ["RS256", "ES256"]


def test_mode_env_overrides_config_and_the_secret_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_SECRET", SECRET)
    monkeypatch.setenv("DEERFLOW_AUTH_MODE", "none")
    assert load(tmp_path, {"mode": "jwt"}).effective_mode == "none"
    monkeypatch.delenv("DEERFLOW_AUTH_MODE")
    assert load(tmp_path, {"mode": "none"}).effective_mode == "none"


def test_public_key_and_jwks_select_jwt_with_asymmetric_algorithms(tmp_path: Path) -> None:
    config = load(tmp_path, {"jwt": {"public_key": PEM, "audience": "api"}})
    assert config.effective_mode == "jwt"
    assert config.jwt.allowed_algorithms() == ["RS256", "ES256"]
    assert config.jwt.audience == ["api"]
    config = load(
        tmp_path, {"jwt": {"jwks_url": "https://idp.test/jwks", "secret": SECRET, "audience": "a"}}
    )
    assert config.jwt.allowed_algorithms() == ["HS256", "RS256", "ES256"]
    for keys in ({"public_key": PEM}, {"jwks_url": "https://idp.test/jwks", "secret": SECRET}):
        with pytest.raises(ConfigError, match=r"jwt\.audience is required"):
            load(tmp_path, {"jwt": keys})


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        ({"mode": "jwt"}, "auth: Value error, mode jwt needs jwt.secret"),
        (
            {"mode": "jwt", "jwt": {"secret": "short"}},
            "auth.jwt.secret: Value error, must be at least 32",
        ),
        ({"jwt": {"public_key": "not a pem"}}, "auth.jwt.public_key: Value error, is not a PEM"),
        (
            {"jwt": {"jwks_url": "file:///etc/keys"}},
            "auth.jwt.jwks_url: Value error, must be an http",
        ),
        (
            {"jwt": {"secret": SECRET, "algorithms": ["RS256"]}},
            "algorithms: RS256 needs jwt.public_key or jwt.jwks_url",
        ),
        (
            {"jwt": {"public_key": PEM, "audience": "a", "algorithms": ["HS256"]}},
            "algorithms: HS256 needs jwt.secret",
        ),
        (
            {"jwt": {"secret": SECRET, "algorithms": ["none"]}},
            "algorithms: 'none' is not supported",
        ),
        ({"mode": "api_key"}, "mode api_key needs at least one api_keys entry"),
        (
            {"mode": "jwt", "jwt": {"secret": SECRET}, "studio": "local"},
            "studio: 'local' is only valid",
        ),
        ({"mode": "oauth"}, "auth.mode: Input should be 'none', 'jwt' or 'api_key'"),
        ({"jwt": {"secret": SECRET, "typo": 1}}, "auth.jwt.typo: unknown key"),
        (
            {
                "mode": "api_key",
                "api_keys": [
                    {"identity": "a", "sha256": hash_api_key("k")},
                    {"identity": "b", "sha256": hash_api_key("k")},
                ],
            },
            "two entries have the same sha256",
        ),
        (
            {
                "mode": "api_key",
                "api_keys": [{"identity": "studio:x", "sha256": hash_api_key("k")}],
            },
            "is reserved for the server",
        ),
    ],
)
def test_invalid_auth_config_names_the_key(
    tmp_path: Path, auth: dict[str, Any], message: str
) -> None:
    assert message in error(tmp_path, auth)


def test_secret_from_an_env_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_JWT_SECRET", SECRET)
    config = load(tmp_path, {"mode": "jwt", "jwt": {"secret": "$MY_JWT_SECRET"}})
    assert config.jwt.secret is not None and config.jwt.secret.get_secret_value() == SECRET
