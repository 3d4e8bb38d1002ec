"""Config loading: defaults, YAML, $VAR resolution, env overrides, readable errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import (
    ConfigError,
    aget_settings,
    get_settings,
    load_settings,
    reset_settings_cache,
)
from tests.support.scripted import ai_text, write_config


def test_built_in_defaults_without_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DEERFLOW_CONFIG", raising=False)
    monkeypatch.setattr("runtime.config.PROJECT_ROOT", tmp_path)
    settings = load_settings(tmp_path / "absent.yaml")
    assert settings.default_model.name == "scripted"
    assert settings.default_model.use == "runtime.scripted_model:ScriptedChatModel"


def test_yaml_file_and_env_reference(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MY_TEST_KEY", "sk-from-env")
    path = write_config(
        tmp_path,
        models=[
            {
                "name": "gpt",
                "use": "langchain_openai:ChatOpenAI",
                "model": "gpt-4o",
                "api_key": "$MY_TEST_KEY",
                "base_url": "${MY_TEST_KEY}",
            }
        ],
    )
    settings = load_settings(path)
    kwargs = settings.default_model.constructor_kwargs()
    assert kwargs == {"model": "gpt-4o", "api_key": "sk-from-env", "base_url": "sk-from-env"}


def test_missing_env_reference_resolves_to_none(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        models=[{"name": "m", "use": "langchain_openai:ChatOpenAI", "api_key": "$NOPE_NOT_SET_X"}],
    )
    assert load_settings(path).default_model.constructor_kwargs()["api_key"] is None


def test_env_override_beats_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = write_config(tmp_path, [ai_text("hi")], database={"uri": "postgresql://file"})
    monkeypatch.setenv("DEERFLOW_POSTGRES_URI", "postgresql://env")
    assert load_settings(path).database.uri == "postgresql://env"


def test_unknown_use_path_names_the_entry(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        models=[
            {"name": "good", "use": "runtime.scripted_model:ScriptedChatModel"},
            {"name": "broken", "use": "no_such_module.anywhere:Model"},
        ],
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert "models[1]" in message and "'broken'" in message and "no_such_module" in message


def test_missing_attribute_names_the_entry(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, models=[{"name": "x", "use": "runtime.scripted_model:NoSuchClass"}]
    )
    with pytest.raises(ConfigError, match=r"models\[0\] \(model 'x'\).*NoSuchClass"):
        load_settings(path)


def test_missing_required_key_names_the_entry(tmp_path: Path) -> None:
    path = write_config(tmp_path, models=[{"name": "no-use"}])
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "models[0].use" in str(info.value) and "'no-use'" in str(info.value)
    assert "Field required" in str(info.value)


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, [ai_text("x")], sandbox={"usee": "typo"})
    with pytest.raises(ConfigError, match=r"sandbox\.usee: unknown key"):
        load_settings(path)


def test_malformed_use_shape(tmp_path: Path) -> None:
    path = write_config(tmp_path, models=[{"name": "m", "use": "just_a_module"}])
    with pytest.raises(ConfigError, match=r"models\[0\]\.use.*module\.path:ClassName"):
        load_settings(path)


def test_duplicate_model_names(tmp_path: Path) -> None:
    entry = {"name": "same", "use": "runtime.scripted_model:ScriptedChatModel"}
    path = write_config(tmp_path, models=[entry, dict(entry)])
    with pytest.raises(ConfigError, match="duplicate model name 'same'"):
        load_settings(path)


def test_invalid_yaml_and_non_mapping(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [unclosed", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_settings(listing)


def test_named_config_that_does_not_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEERFLOW_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings()


def test_no_models_is_a_clear_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, models=[])
    with pytest.raises(ConfigError, match="no model is configured"):
        _ = load_settings(path).default_model


async def test_settings_are_cached_and_loaded_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, use_config: object
) -> None:
    path = write_config(tmp_path, [ai_text("x")])
    monkeypatch.setenv("DEERFLOW_CONFIG", str(path))
    reset_settings_cache()
    calls: list[int] = []
    real = load_settings

    def counting(p: Path | None = None) -> object:
        calls.append(1)
        return real(p)

    monkeypatch.setattr("runtime.config.load_settings", counting)
    first = await aget_settings()
    assert get_settings() is first
    assert await aget_settings() is first
    assert len(calls) == 1


def test_example_config_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    """config.example.yaml documents every key, so it must load as it is."""
    from runtime.config import PROJECT_ROOT

    settings = load_settings(PROJECT_ROOT / "config.example.yaml")
    assert settings.default_model.name == "scripted"
    assert [m.name for m in settings.models][1:] == ["gpt-4o", "local-qwen", "claude-sonnet"]
