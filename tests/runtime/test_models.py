"""Model selection and construction from config."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI

from runtime.config import ConfigError, ModelConfig, load_settings
from runtime.models import create_chat_model, resolve_model_name
from runtime.scripted_model import ScriptedChatModel
from tests.support.scripted import scripted_model_entry, write_config


def _settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load_settings(
        write_config(
            tmp_path,
            models=[
                scripted_model_entry([{"content": "a"}], name="first"),
                scripted_model_entry([{"content": "b"}], name="second"),
            ],
        )
    )


def test_default_is_first_entry(tmp_path: Path) -> None:
    resolved = resolve_model_name(_settings(tmp_path), None)
    assert resolved.name == "first" and resolved.warning is None


def test_named_entry_is_selected(tmp_path: Path) -> None:
    resolved = resolve_model_name(_settings(tmp_path), "second")
    assert resolved.name == "second" and resolved.warning is None


def test_unknown_name_falls_back_with_warning(tmp_path: Path) -> None:
    resolved = resolve_model_name(_settings(tmp_path), "gpt-9")
    assert resolved.name == "first"
    assert resolved.warning is not None and "gpt-9" in resolved.warning


def test_openai_compatible_local_endpoint_is_constructed() -> None:
    entry = ModelConfig.model_validate(
        {
            "name": "local",
            "use": "langchain_openai:ChatOpenAI",
            "model": "qwen",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key": "not-needed",
        }
    )
    model = create_chat_model(entry)
    assert isinstance(model, ChatOpenAI)
    assert model.openai_api_base == "http://127.0.0.1:9/v1"
    assert model.model_name == "qwen"


def test_anthropic_thinking_kwargs_apply_only_when_enabled() -> None:
    entry = ModelConfig.model_validate(
        {
            "name": "claude",
            "use": "langchain_anthropic:ChatAnthropic",
            "model": "claude-sonnet-4-5",
            "api_key": "sk-test",
            "supports_thinking": True,
            "max_tokens": 8000,
            "thinking": {"thinking": {"type": "enabled", "budget_tokens": 2000}},
        }
    )
    plain = create_chat_model(entry)
    thinking = create_chat_model(entry, thinking_enabled=True)
    assert isinstance(plain, ChatAnthropic) and isinstance(thinking, ChatAnthropic)
    assert plain.thinking is None
    assert thinking.thinking == {"type": "enabled", "budget_tokens": 2000}


def test_constructor_error_names_the_entry() -> None:
    entry = ModelConfig.model_validate(
        {"name": "bad", "use": "runtime.scripted_model:ScriptedChatModel", "script": "not a list"}
    )
    with pytest.raises(ConfigError, match="model 'bad': cannot construct"):
        create_chat_model(entry)


def test_non_chat_model_class_is_refused() -> None:
    entry = ModelConfig.model_validate({"name": "odd", "use": "pathlib:Path"})
    with pytest.raises(ConfigError, match="model 'odd' use: 'pathlib:Path' is not a BaseChatModel"):
        create_chat_model(entry)


def test_scripted_entry_builds_scripted_model(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    model = create_chat_model(settings.models[1])
    assert isinstance(model, ScriptedChatModel)
    assert model.script[0].content == "b"
