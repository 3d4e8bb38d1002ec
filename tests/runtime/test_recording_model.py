"""The recording model keeps what each request carried, in-process and through the server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from runtime.recording_model import RecordingChatModel, clear_recordings, recorded_calls
from tests.support.agents import make_agent
from tests.support.scripted import (
    ai_text,
    ai_tools,
    recording_model_entry,
    tool_call,
    write_config,
)
from tests.support.tools import echo

SCRIPT = [ai_tools(tool_call("echo", text="ping")), ai_text("done")]


async def test_records_messages_and_bound_tools_per_call() -> None:
    key = f"unit-{uuid.uuid4().hex}"
    model = RecordingChatModel.model_validate({"script": SCRIPT, "recording_key": key})
    agent = make_agent(model, [echo], middleware=[])
    await agent.ainvoke(
        {"messages": [HumanMessage("hi")]},
        {"configurable": {"thread_id": "t"}},
    )
    calls = recorded_calls(key)
    assert len(calls) == 2
    assert calls[0].tools == ["echo"]
    assert calls[0].tool_schemas[0]["function"]["name"] == "echo"
    assert [m.type for m in calls[1].messages][-2:] == ["ai", "tool"]
    assert calls[1].unanswered_tool_calls() == []
    assert "echo: ping" in calls[1].text
    clear_recordings(key)
    assert recorded_calls(key) == []


@pytest.mark.server
async def test_records_through_the_server(tmp_path: Path, use_config: Any, lg_client: Any) -> None:
    key = f"server-{uuid.uuid4().hex}"
    use_config(
        write_config(
            tmp_path,
            models=[recording_model_entry(SCRIPT, key=key)],
            tools=[{"name": "echo", "use": "tests.support.tools:echo"}],
        )
    )
    client = lg_client()
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "echo ping please"}]},
    )
    calls = recorded_calls(key)
    assert len(calls) == 2
    assert "echo" in calls[0].tools
    assert calls[0].system_messages, "the lead chain sends a system prompt"
    assert calls[1].unanswered_tool_calls() == []
