"""Extensions in served runs: the in-process LangGraph Server and a ``langgraph dev`` black box.

The graph factories load plugins off the event loop (``langgraph dev`` raises on
blocking calls), then build the fused chain; the run must behave as in-process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from deerflow_extension_api._plugins import load_extensions
from runtime.config import get_settings
from tests.support.demo_extension import Recorder
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config

PLUGINS = [
    {
        "module": "tests.support.demo_extension",
        "config": {
            "contributions": [
                {"kind": "ToolObserver", "placement": "TOOL_VISIBLE"},
                {"kind": "StateObserver", "placement": "STANDARD"},
            ]
        },
    }
]
SCRIPT = [
    ai_tools(tool_call("echo", text="one")),
    ai_tools(tool_call("echo", text="two")),
    ai_text("done"),
]


def _config(directory: Path) -> Path:
    return write_config(
        directory,
        SCRIPT,
        tools=[{"name": "echo", "use": "tests.support.tools:echo"}],
        plugins=PLUGINS,
        extensions={"middlewares": [{"class": "tests.support.demo_extension:ConfiguredAudit"}]},
    )


@pytest.mark.server
async def test_served_run_with_extensions(lg_client: Any, tmp_path: Path, use_config: Any) -> None:
    use_config(_config(tmp_path))
    client = lg_client()
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"], "lead_agent", input={"messages": [{"role": "user", "content": "go"}]}
    )
    assert result["messages"][-1]["content"] == "done"
    assert [m["content"] for m in result["messages"] if m["type"] == "tool"] == [
        "echo: one",
        "echo: two",
    ]
    recorder = load_extensions(get_settings()).app_store.get(Recorder)
    assert recorder is not None
    counts = [e[3] for e in recorder.events if e[2] in ("in", "before_model")]
    assert counts == [1, 2, 3, 4, 5]  # one task store for the run, seen by every hook


@pytest.mark.server
async def test_interrupts_propagate_through_isolated_wrappers(
    lg_client: Any, tmp_path: Path, use_config: Any
) -> None:
    script = [ai_tools(tool_call("ask_human", question="which color?")), ai_text("done")]
    use_config(
        write_config(
            tmp_path,
            script,
            tools=[{"name": "ask_human", "use": "tests.support.demo_extension:ask_human"}],
            plugins=[
                {
                    "module": "tests.support.demo_extension",
                    "config": {
                        "contributions": [
                            {"kind": "ToolObserver", "placement": "TOOL_VISIBLE"},
                            {"kind": "ToolObserver", "placement": "TOOL_RAW"},
                        ]
                    },
                }
            ],
        )
    )
    client = lg_client()
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"], "lead_agent", input={"messages": [{"role": "user", "content": "go"}]}
    )
    state = await client.threads.get_state(thread["thread_id"])
    assert [i["value"] for i in state["interrupts"]] == ["which color?"]
    result = await client.runs.wait(thread["thread_id"], "lead_agent", command={"resume": "blue"})
    assert result["messages"][-1]["content"] == "done"
    assert result["messages"][-2]["content"] == "human said: blue"


@pytest.mark.blackbox
async def test_langgraph_dev_runs_the_chain_with_extensions(
    dev_server: Any, tmp_path: Path
) -> None:
    path = _config(tmp_path)
    # Starting and reading the subprocess's log are blocking: keep them off the loop.
    server = await asyncio.to_thread(dev_server, env={"DEERFLOW_CONFIG": str(path)})
    client = server.client()
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"], "lead_agent", input={"messages": [{"role": "user", "content": "go"}]}
    )
    log = await asyncio.to_thread(server.log)
    assert result["messages"][-1]["content"] == "done", log
    async with httpx.AsyncClient(base_url=server.url) as http:
        policies = (await http.get("/policies")).json()
    names = [m["name"] for m in policies["lead_agent"]["middlewares"]]
    assert "ConfiguredAudit" in names
    assert any(n.startswith("extension_tests_support_demo_extension_install_") for n in names)
    assert "Blocking call" not in await asyncio.to_thread(server.log)
