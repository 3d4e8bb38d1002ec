"""Black box: `langgraph dev` as a subprocess, the way a user runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.scripted import ai_text, ai_tools, tool_call, write_config

pytestmark = pytest.mark.blackbox


async def test_langgraph_dev_serves_scripted_run_without_blocking_errors(
    tmp_path: Path, dev_server: Any
) -> None:
    config = write_config(
        tmp_path,
        [ai_tools(tool_call("echo", text="from dev")), ai_text("Dev server answered.")],
        tools=[{"name": "echo", "use": "tests.support.tools:echo"}],
    )
    server = dev_server(env={"DEERFLOW_CONFIG": str(config)})
    async with httpx.AsyncClient(base_url=server.url, timeout=5) as http:
        assert (await http.get("/ok")).status_code == 200

    client = server.client()
    graphs = {a["graph_id"] for a in await client.assistants.search()}
    assert {"lead_agent", "subagent"} <= graphs

    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"], "lead_agent", input={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert result["messages"][-1]["content"] == "Dev server answered."
    state = await client.threads.get_state(thread["thread_id"])
    assert [m["type"] for m in state["values"]["messages"]] == ["human", "ai", "tool", "ai"]

    log = server.log()
    assert "BlockingError" not in log, log
    assert "Blocking call" not in log, log
