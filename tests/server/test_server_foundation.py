"""Foundation acceptance through a real LangGraph Server (in-process, over ASGI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.scripted import ai_text, ai_tools, tool_call, write_config

pytestmark = pytest.mark.server

SCRIPT = [ai_tools(tool_call("echo", text="ping")), ai_text("The echo said ping. Done.")]
ECHO_TOOL = [{"name": "echo", "use": "tests.support.tools:echo"}]


@pytest.fixture
def scripted_config(tmp_path: Path, use_config: Any) -> Path:
    return use_config(write_config(tmp_path, SCRIPT, tools=ECHO_TOOL))


async def test_assistants_for_both_graphs(lg_client: Any) -> None:
    client = lg_client()
    graphs = {a["graph_id"] for a in await client.assistants.search()}
    assert {"lead_agent", "subagent"} <= graphs


async def test_runs_wait_and_state_history(lg_client: Any, scripted_config: Path) -> None:
    client = lg_client()
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "echo ping please"}]},
    )
    assert result["messages"][-1]["content"] == "The echo said ping. Done."

    state = await client.threads.get_state(thread["thread_id"])
    messages = state["values"]["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"]
    call = messages[1]["tool_calls"][0]
    assert call["name"] == "echo" and call["args"] == {"text": "ping"}
    assert messages[2]["tool_call_id"] == call["id"] and messages[2]["content"] == "echo: ping"
    assert state["metadata"]["model_name"] == "scripted"
    assert state["metadata"]["agent_name"] == "lead_agent"


async def test_stream_messages_streams_scripted_tokens(
    lg_client: Any, scripted_config: Path
) -> None:
    client = lg_client()
    thread = await client.threads.create()
    partials: list[str] = []
    async for part in client.runs.stream(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "go"}]},
        stream_mode="messages",
    ):
        if part.event == "messages/partial" and part.data and part.data[0].get("type") == "ai":
            partials.append(part.data[0]["content"])
    assert "The " in partials  # the first token on its own: streamed, not one blob
    assert partials[-1] == "The echo said ping. Done."


async def test_unknown_model_falls_back_and_is_recorded(
    lg_client: Any, scripted_config: Path
) -> None:
    client = lg_client()
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "go"}]},
        context={"model_name": "does-not-exist"},
    )
    state = await client.threads.get_state(thread["thread_id"])
    assert state["metadata"]["model_name"] == "scripted"
    assert "does-not-exist" in state["metadata"]["model_warning"]


async def test_subagent_graph_runs_on_its_own(lg_client: Any, scripted_config: Path) -> None:
    client = lg_client()
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"], "subagent", input={"messages": [{"role": "user", "content": "go"}]}
    )
    assert result["messages"][-1]["content"] == "The echo said ping. Done."


async def test_health_reports_models_without_secrets(
    lg_server: Any, tmp_path: Path, use_config: Any
) -> None:
    use_config(
        write_config(
            tmp_path,
            models=[
                {
                    "name": "gpt",
                    "use": "langchain_openai:ChatOpenAI",
                    "api_key": "sk-super-secret",
                    "supports_vision": True,
                }
            ],
        )
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=lg_server), base_url="http://test"
    ) as http:
        response = await http.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["version"]
    assert body["models"] == [
        {
            "name": "gpt",
            "display_name": "gpt",
            "supports_vision": True,
            "supports_thinking": False,
            "context_window": None,
            "default": True,
        }
    ]
    assert "sk-super-secret" not in response.text
