"""MCP tools through the real in-process server: offered to the model, called, results back."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from runtime.recording_model import recorded_calls
from tests.support.scripted import ai_text, ai_tools, recording_model_entry, tool_call, write_config
from tests.tools.test_mcp import SERVER

pytestmark = pytest.mark.server


async def test_mcp_tools_reach_the_model_and_their_results_come_back(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Any
) -> None:
    key = f"mcp-{uuid.uuid4().hex}"
    script = [
        ai_tools(tool_call("add", a=2, b=3), tool_call("fail"), tool_call("report")),
        ai_text("done"),
    ]
    use_config(
        write_config(
            tmp_path,
            models=[recording_model_entry(script, key=key)],
            data_root=str(tmp_path / "data"),
            mcp_servers={
                "calc": {"transport": "stdio", "command": sys.executable, "args": [SERVER]},
                "down": {"transport": "stdio", "command": "/nonexistent/mcp"},
            },
        )
    )
    client = lg_client()
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "add 2 and 3"}]},
    )
    assert result["messages"][-1]["content"] == "done"
    first, second = recorded_calls(key)
    assert {"add", "report", "fail", "calc_read_file", "read_file"} <= set(first.tools)
    add_schema = next(s for s in first.tool_schemas if s["function"]["name"] == "add")
    assert set(add_schema["function"]["parameters"]["properties"]) == {"a", "b"}

    tools = {m.name: m for m in second.messages if isinstance(m, ToolMessage)}
    assert tools["add"].text == "2 + 3 = 5"
    assert tools["fail"].status == "error"
    assert tools["fail"].additional_kwargs["deerflow_tool_meta"]["status"] == "error"
    assert "failed on purpose" in tools["fail"].text
    assert "[image from the MCP tool: image/png" in tools["report"].text
    assert second.unanswered_tool_calls() == []
