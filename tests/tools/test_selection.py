"""Which tools each agent gets: groups from config, vision and command gates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.config import load_settings
from tests.support.scripted import ai_text, scripted_model_entry, write_config
from tools.registry import DEFAULT_TOOLS
from tools.selection import select_tools

ALL = ["bash", "ls", "glob", "grep", "read_file", "write_file", "str_replace", "present_files"]
WEB = ["web_fetch"]  # web_search only with a search provider key


def _names(
    tmp_path: Path, *, vision: bool = False, kind: str = "lead_agent", **sections: Any
) -> list[str]:
    settings = load_settings(
        write_config(
            tmp_path,
            models=[scripted_model_entry([ai_text("x")], supports_vision=vision)],
            **sections,
        )
    )
    model = settings.default_model
    return [t.name for t in select_tools(settings, kind=kind, model=model)]  # type: ignore[arg-type]


MEMORY = ["memory_save", "memory_search", "memory_delete"]
ASK = "ask_clarification"


def test_default_set_for_the_lead_agent(tmp_path: Path) -> None:
    assert [t.name for t in DEFAULT_TOOLS] == [
        *ALL,
        "web_fetch",
        "web_search",
        "view_image",
        ASK,
        *MEMORY,
    ]
    assert _names(tmp_path) == [*ALL, *WEB, ASK]
    assert _names(tmp_path, vision=True) == [*ALL, *WEB, "view_image", ASK]


def test_web_search_needs_its_provider_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    assert _names(tmp_path)[len(ALL) : len(ALL) + 2] == ["web_fetch", "web_search"]


def test_memory_tools_only_for_the_lead_in_tool_mode(tmp_path: Path) -> None:
    tool_mode = {"enabled": True, "mode": "tool"}
    assert _names(tmp_path, memory=tool_mode) == [*ALL, *WEB, ASK, *MEMORY]
    assert "memory_save" not in _names(tmp_path, memory={"enabled": True})
    assert "memory_save" not in _names(tmp_path, kind="subagent", memory=tool_mode)


def test_subagents_do_not_present_files_or_ask_the_user(tmp_path: Path) -> None:
    assert _names(tmp_path, kind="subagent") == [n for n in ALL if n != "present_files"] + WEB


def test_groups_and_gates_from_config(tmp_path: Path) -> None:
    assert _names(tmp_path, tool_groups={"lead_agent": ["files"]}) == ALL[1:7]
    assert _names(tmp_path, sandbox={"allow_host_bash": False}) == [*ALL[1:], *WEB, ASK]
    # A configured group cannot bypass the vision gate.
    assert "view_image" not in _names(tmp_path, tool_groups={"lead_agent": ["vision"]})
