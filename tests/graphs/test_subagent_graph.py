"""The ``subagent`` graph builder: type selection, tools, model and turn cap."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from graphs.subagent import build_subagent, recursion_limit_for
from runtime.config import ConfigError, Settings, load_settings
from runtime.recording_model import clear_recordings, recorded_calls
from subagents.types import subagent_types, type_takes_mcp_tools
from tests.support.delegation import delegation_config
from tests.support.scripted import (
    ai_text,
    recording_model_entry,
    scripted_model_entry,
    write_config,
)


def settings_for(tmp_path: Path) -> Settings:
    return load_settings(
        delegation_config(
            tmp_path,
            lead=[ai_text("lead")],
            worker=[ai_text("worker")],
            extra_models=[scripted_model_entry([ai_text("special")], name="special")],
            max_turns=7,
            types=[
                {
                    "name": "focused",
                    "description": "d",
                    "system_prompt": "You are focused.",
                    "tools": ["echo"],
                    "model": "special",
                    "max_turns": 3,
                }
            ],
        )
    )


def tool_names(graph: object) -> set[str]:
    nodes = graph.nodes  # type: ignore[attr-defined]
    return set(nodes["tools"].bound.tools_by_name) if "tools" in nodes else set()


def test_default_type_is_general_purpose_without_task(tmp_path: Path) -> None:
    graph = build_subagent(settings_for(tmp_path), None)
    assert graph.config is not None
    assert tool_names(graph) == {"echo", "gate", "hang", "whoami"}
    assert graph.config["metadata"]["subagent_type"] == "general-purpose"
    assert graph.config["metadata"]["subagent_enabled"] is False
    assert graph.config["recursion_limit"] == recursion_limit_for(graph, 7)


async def test_custom_type_from_context_sets_tools_model_and_turn_cap(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    config = {"context": {"subagent_type": "focused", "model_name": "lead"}}
    graph = build_subagent(settings, config)  # type: ignore[arg-type]
    assert graph.config is not None
    assert tool_names(graph) == {"echo"}
    assert graph.config["metadata"]["model_name"] == "special"  # the type's own model wins
    assert graph.config["recursion_limit"] == recursion_limit_for(graph, 3)
    result = await graph.ainvoke({"messages": [{"role": "user", "content": "hi"}]})
    assert result["messages"][-1].content == "special"


def test_unknown_type_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown subagent_type 'wizard'; available: bash"):
        build_subagent(settings_for(tmp_path), {"configurable": {"subagent_type": "wizard"}})


def test_a_subagent_gets_tool_search_over_its_own_deferred_tools(tmp_path: Path) -> None:
    settings = load_settings(
        write_config(
            tmp_path,
            models=[scripted_model_entry([ai_text("w")], name="worker")],
            tools=[
                {"name": "echo", "use": "tests.support.tools:echo", "deferred": True},
                {"name": "gate", "use": "tests.support.subagent_tools:gate"},
            ],
            tool_search={"enabled": True},
            subagents={
                "types": [
                    {
                        "name": "gated",
                        "description": "d",
                        "system_prompt": "p",
                        "tools": ["gate", "group:mcp"],
                    }
                ]
            },
        )
    )
    assert tool_names(build_subagent(settings, None)) == {"echo", "gate", "tool_search"}
    # No deferred tool of its own, no tool_search ("group:mcp" is a valid selector).
    gated = build_subagent(settings, {"configurable": {"subagent_type": "gated"}})
    assert tool_names(gated) == {"gate"}
    types = subagent_types(settings)
    assert type_takes_mcp_tools(types["general-purpose"]) and type_takes_mcp_tools(types["gated"])
    assert not type_takes_mcp_tools(types["bash"])


@pytest.mark.parametrize(("vision", "search_key"), [(False, False), (True, True)])
async def test_the_model_is_offered_only_the_gated_default_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vision: bool, search_key: bool
) -> None:
    """A real subagent graph with the default tools and memory in tool mode: the
    model sees no memory tools (lead-only), view_image only on a vision model and
    web_search only with its provider's key."""
    if search_key:
        monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    else:
        monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    key = f"subagent-tools-{uuid.uuid4().hex}"
    settings = load_settings(
        write_config(
            tmp_path,
            models=[recording_model_entry([ai_text("done")], key=key, supports_vision=vision)],
            memory={"enabled": True, "mode": "tool"},
        )
    )
    graph = build_subagent(settings, {"configurable": {"thread_id": "t-subagent-tools"}})
    try:
        await graph.ainvoke({"messages": [{"role": "user", "content": "list the files"}]})
        (call,) = recorded_calls(key)
    finally:
        clear_recordings(key)
    expected = ["bash", "ls", "glob", "grep", "read_file", "write_file", "str_replace"]
    expected += ["web_fetch", *(["web_search"] if search_key else [])]
    expected += ["view_image"] if vision else []
    assert call.tools == expected
