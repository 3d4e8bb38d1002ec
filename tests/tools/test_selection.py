"""Which tools each agent gets: groups from config, vision and command gates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.config import load_settings
from subagents.types import subagent_types
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


# The gates hold for every agent kind: the lead, the general-purpose subagent,
# and a subagent type whose ``tools:`` list names every gated tool outright.
LISTER = {
    "name": "lister",
    "description": "d",
    "system_prompt": "p",
    "tools": ["read_file", "view_image", "web_search", *MEMORY],
}
AGENTS = [("lead_agent", None), ("subagent", None), ("subagent", "general-purpose")]
AGENTS += [("subagent", "lister")]


def _agent_names(
    tmp_path: Path, agent: tuple[str, str | None], *, vision: bool = False, **sections: Any
) -> set[str]:
    kind, type_name = agent
    settings = load_settings(
        write_config(
            tmp_path,
            models=[scripted_model_entry([ai_text("x")], supports_vision=vision)],
            subagents={"types": [LISTER]},
            **sections,
        )
    )
    subagent_type = None if type_name is None else subagent_types(settings)[type_name]
    tools = select_tools(
        settings,
        kind=kind,  # type: ignore[arg-type]
        model=settings.default_model,
        subagent_type=subagent_type,
    )
    return {t.name for t in tools}


@pytest.mark.parametrize("agent", AGENTS)
def test_memory_gate_for_every_kind(tmp_path: Path, agent: tuple[str, str | None]) -> None:
    tool_mode = _agent_names(tmp_path, agent, memory={"enabled": True, "mode": "tool"})
    if agent[0] == "lead_agent":
        assert set(MEMORY) <= tool_mode
    else:  # lead-only: subagent runs never write memory
        assert not set(MEMORY) & tool_mode
    for memory in ({"enabled": True, "mode": "auto"}, {"enabled": False, "mode": "tool"}):
        assert not set(MEMORY) & _agent_names(tmp_path, agent, memory=memory)
    assert "read_file" in tool_mode  # the kind's other tools stay


@pytest.mark.parametrize("agent", AGENTS)
def test_vision_gate_for_every_kind(tmp_path: Path, agent: tuple[str, str | None]) -> None:
    assert "view_image" not in _agent_names(tmp_path, agent, vision=False)
    assert "view_image" in _agent_names(tmp_path, agent, vision=True)


@pytest.mark.parametrize("agent", AGENTS)
def test_search_key_gate_for_every_kind(
    tmp_path: Path, agent: tuple[str, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    assert "web_search" not in _agent_names(tmp_path, agent)
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    assert "web_search" in _agent_names(tmp_path, agent)


def test_command_gate_for_the_bash_type(tmp_path: Path) -> None:
    agent = ("subagent", "bash")
    assert "bash" in _agent_names(tmp_path, agent)
    without = _agent_names(tmp_path, agent, sandbox={"allow_host_bash": False})
    assert "bash" not in without
    assert "read_file" in without


def test_a_subagent_type_keeps_its_allow_list(tmp_path: Path) -> None:
    # The gates only remove: the lister gets no tool its list leaves out.
    names = _agent_names(tmp_path, ("subagent", "lister"), vision=True)
    assert names == {"read_file", "view_image"}
