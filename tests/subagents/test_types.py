"""Subagent types: tool selection by name and group, custom types, config validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.config import ConfigError, load_settings
from subagents.types import available_subagent_types, resolve_type_tools, subagent_types
from tests.support.scripted import ai_text, write_config
from tools.task import TOOL_CATALOG

ECHO = "tests.support.tools:echo"


def tools_named(*entries: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "group": group, "use": ECHO} for name, group in entries]


def settings_with(tmp_path: Path, **sections: Any) -> Any:
    return load_settings(write_config(tmp_path, [ai_text("x")], **sections))


def test_general_purpose_gets_the_leads_tools_minus_three(tmp_path: Path) -> None:
    settings = settings_with(
        tmp_path,
        tools=tools_named(
            ("bash", "sandbox"),
            ("web_search", "web"),
            ("task", "agents"),
            ("ask_clarification", "interaction"),
            ("present_files", "file:write"),
        ),
    )
    types = subagent_types(settings)  # type: ignore[arg-type]
    names = {t.name for t in resolve_type_tools(settings, types["general-purpose"], TOOL_CATALOG)}  # type: ignore[arg-type]
    assert names == {"bash", "web_search"}


def test_bash_gets_shell_and_file_tools_by_name_or_group(tmp_path: Path) -> None:
    settings = settings_with(
        tmp_path,
        tools=tools_named(
            ("bash", "sandbox"),
            ("read_file", "file:read"),
            ("custom_fs", "file:write"),
            ("web_search", "web"),
            ("ask_clarification", "file:read"),
        ),
    )
    bash = subagent_types(settings)["bash"]  # type: ignore[arg-type]
    names = {t.name for t in resolve_type_tools(settings, bash, TOOL_CATALOG)}  # type: ignore[arg-type]
    assert names == {"bash", "read_file", "custom_fs"}


def test_bash_is_offered_only_with_shell_or_file_tools(tmp_path: Path) -> None:
    without = settings_with(tmp_path, tools=tools_named(("web_search", "web")))
    assert [t.name for t in available_subagent_types(without, TOOL_CATALOG)] == ["general-purpose"]  # type: ignore[arg-type]


def test_custom_type_tool_selectors(tmp_path: Path) -> None:
    settings = settings_with(
        tmp_path,
        tools=tools_named(("a", "g1"), ("b", "g1"), ("c", "g2"), ("task", "g2")),
        subagents={
            "types": [
                {
                    "name": "picky",
                    "description": "d",
                    "system_prompt": "p",
                    "tools": ["c", "group:g1", "task"],
                },
                {
                    "name": "broken",
                    "description": "d",
                    "system_prompt": "p",
                    "tools": ["nope", "group:none"],
                },
            ]
        },
    )
    types = subagent_types(settings)  # type: ignore[arg-type]
    assert {t.name for t in resolve_type_tools(settings, types["picky"], TOOL_CATALOG)} == {
        "a",
        "b",
        "c",
    }  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown tool or group 'nope', 'group:none'"):
        resolve_type_tools(settings, types["broken"], TOOL_CATALOG)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("types", "message"),
    [
        ([{"name": "bash", "description": "d", "system_prompt": "p"}], "built-in type"),
        (
            [
                {"name": "x", "description": "d", "system_prompt": "p"},
                {"name": "x", "description": "d", "system_prompt": "p"},
            ],
            "duplicate",
        ),
        (
            [{"name": "Bad Name", "description": "d", "system_prompt": "p"}],
            "subagents.types\\[0\\].name",
        ),
        ([{"name": "x", "description": "d", "system_prompt": "p", "max_turns": 0}], "max_turns"),
        ([{"name": "x", "description": "d", "system_prompt": "p", "colour": "red"}], "unknown key"),
    ],
)
def test_invalid_custom_types_fail_config_loading(
    tmp_path: Path, types: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_with(tmp_path, subagents={"types": types})


def test_environment_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEERFLOW_SUBAGENTS_EXECUTION", "remote")
    monkeypatch.setenv("DEERFLOW_SUBAGENTS_URL", "https://agents.internal:8123")
    monkeypatch.setenv("DEERFLOW_SUBAGENTS_ENABLED", "false")
    settings = settings_with(tmp_path)
    subagents = settings.subagents  # type: ignore[attr-defined]
    assert subagents.execution == "remote"
    assert subagents.remote.url == "https://agents.internal:8123"
    assert subagents.enabled is False
    # The delegation token travels to it: plain http only on loopback.
    monkeypatch.setenv("DEERFLOW_SUBAGENTS_URL", "http://127.0.0.1:8123")
    assert settings_with(tmp_path).subagents.remote.url == "http://127.0.0.1:8123"  # type: ignore[attr-defined]
    for url in ("http://agents.internal:8123", "ftp://x", "https://"):
        monkeypatch.setenv("DEERFLOW_SUBAGENTS_URL", url)
        with pytest.raises(ConfigError, match="https"):
            settings_with(tmp_path)
    monkeypatch.setenv("DEERFLOW_SUBAGENTS_URL", "https://agents.internal:8123")
    monkeypatch.setenv("DEERFLOW_SUBAGENTS_EXECUTION", "carrier-pigeon")
    with pytest.raises(ConfigError, match=r"subagents\.execution"):
        settings_with(tmp_path)
