"""Subagent token usage is attributed once to its dispatching message, both execution modes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from subagents.contract import KEY_TOKEN_USAGE
from tests.support.delegation import delegation_config, streaming_client, task_call
from tests.support.scripted import ai_text, ai_tools

pytestmark = pytest.mark.server


@pytest.mark.parametrize("mode", ["inprocess", "remote"])
async def test_child_usage_is_attributed_once_to_the_dispatching_message(
    mode: str, lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    client = streaming_client(lg_server)
    path = await asyncio.to_thread(
        delegation_config,
        tmp_path,
        lead=[ai_tools(task_call("count things")), ai_text("lead done")],
        worker=[ai_text("worker result")],
        execution=mode,
    )
    use_config(path)
    await asyncio.to_thread(
        path.write_text,
        path.read_text(encoding="utf-8") + "token_usage:\n  enabled: true\n",
        "utf-8",
    )
    use_config(path)
    thread_id = (await client.threads.create())["thread_id"]
    for text in ("go", "and again"):  # a second run must not count the child again
        await client.runs.wait(
            thread_id, "lead_agent", input={"messages": [{"role": "user", "content": text}]}
        )
    values = (await client.threads.get_state(thread_id))["values"]
    result = next(m for m in values["messages"] if m["type"] == "tool")
    child = result["additional_kwargs"][KEY_TOKEN_USAGE]
    assert child["total_tokens"] > 0
    assert result["additional_kwargs"]["subagent_token_usage_attributed"] is True
    dispatch = next(m for m in values["messages"] if m["type"] == "ai" and m["tool_calls"])
    assert dispatch["additional_kwargs"]["subagent_token_usage"] == child
    first_run = next(iter(values["token_usage"].values()))
    assert first_run["subagent"] == child
    assert (
        sum(u.get("subagent", {}).get("total_tokens", 0) for u in values["token_usage"].values())
        == child["total_tokens"]
    )
