"""ToolProgressMiddleware in real ``create_agent`` graphs: warned, blocked, recovered, reset."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from middlewares.tool_error_handling import ToolErrorHandlingMiddleware
from middlewares.tool_progress import TOOL_PROGRESS_EVENT, ToolProgressMiddleware
from runtime.scripted_model import ScriptedChatModel
from tests.support.agents import make_agent
from tests.support.governance_tools import CALLS, flaky, lookup, unsupported
from tests.support.scripted import ai_text, ai_tools, tool_call


@pytest.fixture(autouse=True)
def _calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


async def run(
    middleware: ToolProgressMiddleware,
    script: list[dict[str, Any]],
    *,
    thread_id: str,
    run_id: str,
) -> tuple[list[ToolMessage], list[dict[str, Any]]]:
    model = ScriptedChatModel.model_validate({"script": script})
    agent: Any = make_agent(
        model, [flaky, lookup, unsupported], middleware=[middleware, ToolErrorHandlingMiddleware()]
    )
    config: Any = {"configurable": {"thread_id": thread_id}, "metadata": {"run_id": run_id}}
    events: list[dict[str, Any]] = []
    messages: list[Any] = []
    async for mode, data in agent.astream(
        {"messages": [HumanMessage("go")]},
        config,
        stream_mode=["custom", "values"],
    ):
        if mode == "custom":
            events.append(data)
        else:
            messages = data["messages"]
    progress = [e for e in events if e.get("type") == TOOL_PROGRESS_EVENT]
    return [m for m in messages if isinstance(m, ToolMessage)], progress


def flaky_turns(n: int) -> list[dict[str, Any]]:
    return [ai_tools(tool_call("flaky", query=f"q{i}")) for i in range(n)] + [ai_text("stop")]


async def test_repeated_retryable_failures_move_from_warned_to_blocked() -> None:
    middleware = ToolProgressMiddleware(retryable_failures_to_block=3)
    results, events = await run(middleware, flaky_turns(4), thread_id="t1", run_id="r1")
    assert CALLS["flaky"] == 3  # the fourth call was refused without running
    assert [r.status for r in results] == ["error"] * 4
    assert "blocked for the rest of this run" in results[2].text
    refused = results[3]
    meta = refused.additional_kwargs["deerflow_tool_meta"]
    assert meta["source"] == "tool_progress" and meta["error_type"] == "blocked"
    phases = [(e["tool"], e["phase"], e["action"], e["count"]) for e in events]
    assert phases == [("flaky", "warned", "warn", 1), ("flaky", "blocked", "block_tool", 3)]
    assert all("query" not in str(e) and "q0" not in str(e) for e in events)
    assert {e["hook"] for e in events} == {"awrap_tool_call"}


async def test_a_new_invocation_starts_fresh_and_reports_the_reset() -> None:
    middleware = ToolProgressMiddleware(retryable_failures_to_block=2)
    thread = uuid.uuid4().hex
    await run(middleware, flaky_turns(2), thread_id=thread, run_id="r1")
    assert CALLS["flaky"] == 2
    _, events = await run(middleware, flaky_turns(1), thread_id=thread, run_id="r2")
    assert CALLS["flaky"] == 3  # ran again: the block did not outlive its run
    assert events[0]["phase"] == "reset" and events[0]["hook"] == "abefore_agent"


async def test_recoverable_problems_warn_with_a_hint_and_recover_on_success() -> None:
    middleware = ToolProgressMiddleware()
    script = [
        ai_tools(tool_call("lookup", path="/missing")),
        ai_tools(tool_call("lookup", path="/missing")),
        ai_tools(tool_call("lookup", path="/missing2")),
        ai_tools(tool_call("lookup", path="/ok")),
        ai_text("done"),
    ]
    results, events = await run(middleware, script, thread_id="t3", run_id="r1")
    assert CALLS["lookup"] == 4  # recoverable problems never block
    assert "Hint: Check the path" in results[0].text
    assert results[3].text == "found"
    assert [(e["phase"], e["action"]) for e in events] == [("warned", "warn"), ("ok", "recovered")]


async def test_stop_category_failures_block_that_exact_call_at_once() -> None:
    middleware = ToolProgressMiddleware()
    script = [
        ai_tools(tool_call("unsupported", mode="x")),
        ai_tools(tool_call("unsupported", mode="x")),
        ai_tools(tool_call("unsupported", mode="y")),
        ai_text("done"),
    ]
    results, events = await run(middleware, script, thread_id="t4", run_id="r1")
    assert CALLS["unsupported"] == 2  # mode x once, mode y once
    assert results[1].additional_kwargs["deerflow_tool_meta"]["source"] == "tool_progress"
    assert [e["action"] for e in events] == ["block_call", "block_call"]


def test_the_threshold_is_validated() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ToolProgressMiddleware(retryable_failures_to_block=0)
