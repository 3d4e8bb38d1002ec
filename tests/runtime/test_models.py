"""Model selection and construction from config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize(
    ("use", "extra"),
    [
        ("langchain_openai:ChatOpenAI", {"base_url": "http://127.0.0.1:9/v1"}),
        ("langchain_anthropic:ChatAnthropic", {}),
    ],
)
def test_sdk_retries_are_off_when_our_retries_are_on(use: str, extra: dict[str, str]) -> None:
    """LLMErrorHandling retries; the provider SDK must not retry underneath it."""
    entry = ModelConfig.model_validate(
        {"name": "p", "use": use, "model": "m", "api_key": "k", "max_retries": 5, **extra}
    )
    ours: Any = create_chat_model(entry, sdk_retries=False)
    theirs: Any = create_chat_model(entry)
    assert ours.max_retries == 0
    assert theirs.max_retries == 5
    client = ours.root_client if isinstance(ours, ChatOpenAI) else ours._client
    assert client.max_retries == 0


def test_a_model_without_max_retries_is_built_unchanged() -> None:
    entry = ModelConfig.model_validate(scripted_model_entry([{"content": "a"}], name="s"))
    assert isinstance(create_chat_model(entry, sdk_retries=False), ScriptedChatModel)


async def test_the_lead_agent_model_has_sdk_retries_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As built for a run (``graphs/_build.py``): SDK retries off while
    llm_error_handling is on (the default), the SDK's default when it is off."""
    import asyncio

    import graphs._build as build

    built: list[Any] = []

    def spy(*args: object, **kwargs: object) -> object:
        model = create_chat_model(*args, **kwargs)  # type: ignore[arg-type]
        built.append(model)
        return model

    monkeypatch.setattr(build, "create_chat_model", spy)
    for enabled, expected in ((True, 0), (False, 2)):
        built.clear()
        config_path = write_config(
            tmp_path,
            models=[
                {
                    "name": "claude",
                    "use": "langchain_anthropic:ChatAnthropic",
                    "model": "claude-x",
                    "api_key": "k",
                }
            ],
            llm_error_handling={"enabled": enabled},
        )
        settings = await asyncio.to_thread(load_settings, config_path)
        build.build_agent(settings, None, kind="lead_agent", system_prompt="hi")
        assert [type(m) for m in built] == [ChatAnthropic]
        assert built[0].max_retries == expected
