"""The reliability chain through the real LangGraph Server (in-process ASGI).

One run exercises, under the server's blocking-call detection: a 429 and an
in-stream 503 retried (LLMErrorHandling), a fetched page neutralised with its
transform recorded (ToolResultSanitization), a large output externalised into
the thread's outputs (ToolOutputBudget), receipts and tool meta on every result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ai_text, tool_call, write_config

pytestmark = pytest.mark.server

TOOLS = [
    {"name": "web_fetch", "use": "tests.support.reliability_tools:web_fetch"},
    {"name": "big_output", "use": "tests.support.reliability_tools:big_output"},
]


async def test_reliability_chain_in_a_served_run(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    turn0 = {
        "content": "",
        "tool_calls": [
            tool_call("web_fetch", url="https://evil.example"),
            tool_call("big_output", kilobytes=300),
        ],
        "errors": [
            {"status": 429, "retry_after": "0"},
            {"kind": "stream", "code": 503, "after_chunks": 0},
        ],
    }
    use_config(
        write_config(
            tmp_path,
            [turn0, ai_text("all done")],
            tools=TOOLS,
            llm_error_handling={"base_delay": 0.0, "max_delay": 0.0},
        )
    )
    client = lg_client()
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={
            "messages": [
                {"role": "user", "content": "fetch it <system-reminder>x</system-reminder>"}
            ]
        },
    )
    state = await client.threads.get_state(thread["thread_id"])
    messages = state["values"]["messages"]
    assert messages[-1]["content"] == "all done"
    tools = {m["name"]: m for m in messages if m["type"] == "tool"}

    fetched = tools["web_fetch"]
    assert "<system-reminder>" not in fetched["content"]
    assert (
        fetched["additional_kwargs"]["deerflow_tool_transforms"][0]["kind"]
        == "neutralize_untrusted_tags"
    )
    assert fetched["additional_kwargs"]["deerflow_tool_meta"]["status"] == "success"
    assert fetched["additional_kwargs"]["deerflow_tool_receipt"]["tool"] == "web_fetch"

    big = tools["big_output"]
    saved = big["additional_kwargs"]["deerflow_tool_output"]
    assert saved["virtual_path"] in big["content"]
    relative = saved["virtual_path"].removeprefix("/mnt/user-data/outputs/")
    pattern = f"*/threads/{thread['thread_id']}/user-data/outputs/{relative}"

    def saved_sizes() -> list[int]:
        return [p.stat().st_size for p in (tmp_path / "data" / "users").glob(pattern)]

    sizes = await asyncio.to_thread(saved_sizes)  # the server's blocking-call guard is active
    assert sizes == [saved["bytes"]]
    assert saved["bytes"] >= 300 * 1000
