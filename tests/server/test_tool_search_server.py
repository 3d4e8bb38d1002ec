"""Deferred MCP tools and tool_search through the real in-process server (recorded requests)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from runtime.recording_model import recorded_calls
from tests.support.delegation import task_call
from tests.support.scripted import ai_text, ai_tools, recording_model_entry, tool_call, write_config
from tests.tools.test_mcp import SERVER

pytestmark = pytest.mark.server


def configure(tmp_path: Path, use_config: Callable[[Path], Path], script: list[Any]) -> str:
    key = f"search-{uuid.uuid4().hex}"
    use_config(
        write_config(
            tmp_path,
            models=[recording_model_entry(script, key=key)],
            data_root=str(tmp_path / "data"),
            mcp_servers={"calc": {"command": sys.executable, "args": [SERVER]}},
            tool_search={"enabled": True},
        )
    )
    return key


async def stream(client: Any, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    thread = await client.threads.create()
    events: list[dict[str, Any]] = []
    values: dict[str, Any] = {}
    async for part in client.runs.stream(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": text}]},
        stream_mode=["custom", "values"],
    ):
        if part.event == "custom":
            events.append(part.data)
        elif part.event == "values":
            values = part.data
    return values, events


async def test_mcp_tools_stay_hidden_until_tool_search_promotes_them(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Any
) -> None:
    key = configure(
        tmp_path,
        use_config,
        [
            ai_tools(tool_call("add", a=1, b=1)),
            ai_tools(tool_call("tool_search", query="add two integers")),
            ai_tools(tool_call("add", a=1, b=2)),
            ai_text("done"),
        ],
    )
    values, events = await stream(lg_client(), "please sum some numbers")
    first, second, third, _ = recorded_calls(key)
    assert "tool_search" in first.tools
    assert not {"add", "report", "fail"} & set(first.tools)
    hidden = next(m for m in second.messages if isinstance(m, ToolMessage))
    assert hidden.status == "error" and "tool_search" in hidden.text
    assert "add" in third.tools and "report" not in third.tools
    results = [m["content"] for m in values["messages"] if m["type"] == "tool"]
    assert results[-1] == "1 + 2 = 3"
    assert values["promoted"].keys() >= {"add"}
    promotions = [e for e in events if e.get("type") == "middleware:tool_promotion"]
    assert promotions == [
        {
            "type": "middleware:tool_promotion",
            "source": "tool_search",
            "names": promotions[0]["names"],
        }
    ]
    assert "add" in promotions[0]["names"]


async def test_a_message_naming_a_tool_promotes_it_without_a_search(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Any
) -> None:
    key = configure(tmp_path, use_config, [ai_tools(tool_call("report")), ai_text("done")])
    values, events = await stream(lg_client(), "Run the report tool, please.")
    (first, _) = recorded_calls(key)
    assert "report" in first.tools and "add" not in first.tools
    assert (
        "[image from the MCP tool"
        in next(m for m in values["messages"] if m["type"] == "tool")["content"]
    )
    assert {
        "type": "middleware:tool_promotion",
        "source": "routing_hint",
        "names": ["report"],
    } in events


def configure_delegation(
    tmp_path: Path,
    use_config: Callable[[Path], Path],
    worker: list[Any],
    prompt: str,
    execution: str = "inprocess",
) -> str:
    """A lead that delegates ``prompt`` to a general-purpose subagent playing ``worker``."""
    key = f"search-sub-{uuid.uuid4().hex}"
    use_config(
        write_config(
            tmp_path,
            models=[
                recording_model_entry(
                    [ai_tools(task_call(prompt)), ai_text("lead done")],
                    key=f"{key}-lead",
                    name="lead",
                ),
                recording_model_entry(worker, key=key, name="worker"),
            ],
            data_root=str(tmp_path / "data"),
            mcp_servers={"calc": {"command": sys.executable, "args": [SERVER]}},
            tool_search={"enabled": True},
            subagents={"model": "worker", "execution": execution},
        )
    )
    return key


@pytest.mark.parametrize("execution", ["inprocess", "remote"])
async def test_a_subagent_defers_mcp_tools_until_its_own_tool_search(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Any, execution: str
) -> None:
    key = configure_delegation(
        tmp_path,
        use_config,
        [
            ai_tools(tool_call("add", a=1, b=1)),
            ai_tools(tool_call("tool_search", query="add two integers")),
            ai_tools(tool_call("add", a=1, b=2)),
            ai_text("the sum is 3"),
        ],
        "Sum some numbers.",
        execution,
    )
    values, _ = await stream(lg_client(), "delegate a sum")
    first, second, third, fourth = recorded_calls(key)
    # The subagent gets the MCP tools, deferred: only tool_search at first.
    assert "tool_search" in first.tools
    assert not {"add", "report", "fail"} & set(first.tools)
    hidden = next(m for m in second.messages if isinstance(m, ToolMessage))
    assert hidden.status == "error" and "tool_search" in hidden.text
    assert "add" in third.tools and "report" not in third.tools
    assert "1 + 2 = 3" in [m.text for m in fourth.messages if isinstance(m, ToolMessage)]
    task_result = next(m for m in values["messages"] if m["type"] == "tool")
    assert "the sum is 3" in task_result["content"]
    assert task_result["additional_kwargs"]["subagent_execution"] == execution
    # The subagent's promotions are its own: the lead's tools stay deferred.
    assert "add" not in (values.get("promoted") or {})
    (lead_first, lead_second) = recorded_calls(f"{key}-lead")
    assert "add" not in lead_first.tools and "add" not in lead_second.tools


async def test_a_task_prompt_naming_a_tool_promotes_it_in_the_subagent(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Any
) -> None:
    key = configure_delegation(
        tmp_path,
        use_config,
        [ai_tools(tool_call("report")), ai_text("reported")],
        "Run the report tool and summarise it.",
    )
    values, _ = await stream(lg_client(), "delegate it")
    (first, _) = recorded_calls(key)
    assert "report" in first.tools and "add" not in first.tools
    task_result = next(m for m in values["messages"] if m["type"] == "tool")
    assert "reported" in task_result["content"]
    assert "report" not in (values.get("promoted") or {})
