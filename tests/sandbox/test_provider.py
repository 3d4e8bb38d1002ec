"""``sandbox.use`` selects the provider; bad values fail with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import ConfigError, Settings, load_settings
from sandbox.provider import get_sandbox_provider
from tests.support.sandbox_providers import CountingLocalProvider
from tests.support.scripted import ai_text, write_config


def _settings(tmp_path: Path, use: str) -> Settings:
    return load_settings(write_config(tmp_path, [ai_text("x")], sandbox={"use": use}))


def test_configured_class_is_built_once_per_config(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "tests.support.sandbox_providers:CountingLocalProvider")
    provider = get_sandbox_provider(settings)
    assert isinstance(provider, CountingLocalProvider)
    assert get_sandbox_provider(settings) is provider
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = load_settings(write_config(other_dir, [ai_text("x")]))
    assert get_sandbox_provider(other) is not provider


@pytest.mark.parametrize(
    ("use", "message"),
    [
        ("tests.support.tools:echo", "is not a SandboxProvider class"),
        ("sandbox.base:SandboxError", "is not a SandboxProvider class"),
        ("no.such.module:Provider", "cannot import module"),
        ("sandbox.local:Missing", "has no attribute"),
    ],
)
def test_bad_provider_paths(tmp_path: Path, use: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_sandbox_provider(_settings(tmp_path, use))


def test_use_must_name_a_class(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sandbox\.use"):
        _settings(tmp_path, "sandbox.local.LocalSandboxProvider")
