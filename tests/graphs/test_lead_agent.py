"""The graph factories build real agents that run scripted turns end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from graphs.lead_agent import build_lead_agent, make_lead_agent
from graphs.subagent import make_subagent
from runtime.config import load_settings
from tests.support.scripted import ai_text, ai_tools, scripted_model_entry, tool_call, write_config

ECHO_TOOL = [{"name": "echo", "use": "tests.support.tools:echo"}]


def _config(tmp_path: Path, **sections: Any) -> Path:
    return write_config(
        tmp_path,
        [ai_tools(tool_call("echo", text="hi")), ai_text("Finished.")],
        tools=ECHO_TOOL,
        **sections,
    )


async def test_lead_agent_runs_tool_then_answers(tmp_path: Path, use_config: Any) -> None:
    use_config(_config(tmp_path))
    graph = await make_lead_agent({"configurable": {"thread_id": "t1"}})
    result = await graph.ainvoke({"messages": [HumanMessage("go")]})
    kinds = [type(m).__name__ for m in result["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    tool_message = result["messages"][2]
    assert isinstance(tool_message, ToolMessage) and tool_message.content == "echo: hi"
    assert result["messages"][-1].content == "Finished."


async def test_metadata_records_model_and_switches(tmp_path: Path, use_config: Any) -> None:
    use_config(_config(tmp_path))
    graph = await make_lead_agent(
        {"configurable": {"is_plan_mode": True}, "context": {"agent_name": "researcher"}}  # type: ignore[typeddict-unknown-key]
    )
    metadata = graph.config["metadata"]  # type: ignore[index]
    assert metadata["agent_name"] == "researcher"
    assert metadata["model_name"] == "scripted"
    assert metadata["is_plan_mode"] is True
    assert metadata["thinking_enabled"] is False
    assert metadata["subagent_enabled"] is True
    assert "model_warning" not in metadata


async def test_unknown_model_name_falls_back_with_metadata_warning(
    tmp_path: Path, use_config: Any
) -> None:
    use_config(_config(tmp_path))
    graph = await make_lead_agent({"configurable": {"model_name": "nope"}})
    metadata = graph.config["metadata"]  # type: ignore[index]
    assert metadata["model_name"] == "scripted"
    assert "nope" in metadata["model_warning"]


def test_model_name_selects_the_entry(tmp_path: Path) -> None:
    settings = load_settings(
        write_config(
            tmp_path,
            models=[
                scripted_model_entry([ai_text("from first")], name="first"),
                scripted_model_entry([ai_text("from second")], name="second"),
            ],
            tools=[],
        )
    )
    graph = build_lead_agent(settings, {"configurable": {"model_name": "second"}})
    result = graph.invoke({"messages": [HumanMessage("hi")]})
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and last.content == "from second"


async def test_subagent_factory_runs(tmp_path: Path, use_config: Any) -> None:
    use_config(_config(tmp_path))
    graph = await make_subagent({"configurable": {}})
    result = await graph.ainvoke({"messages": [HumanMessage("task")]})
    assert result["messages"][-1].content == "Finished."
    assert graph.config["metadata"]["agent_name"] == "subagent"  # type: ignore[index]
