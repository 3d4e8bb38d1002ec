"""Acceptance of issue 15's long-conversation middlewares (20, 21, 22, 23, 33).

Through the in-process server, a recording model checks every request the
assembled chain sends; the storage check drives the real lead graph on the
real Postgres saver.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from deerflow_extension_api.provenance import read_provenance
from middlewares.summarization import count_request_tokens
from runtime.recording_model import clear_recordings, recorded_calls
from tests.support.long_conversation import (
    CONTEXT_WINDOW,
    STEPS_PER_RUN,
    long_config,
    run_script,
)
from tests.support.scripted import (
    ai_text,
    ai_tools,
    recording_model_entry,
    scripted_model_entry,
    tool_call,
    write_config,
)
from tests.support.strict_provider import check_strict_request

pytestmark = pytest.mark.server

RUNS = 5  # 5 user runs x 60 model steps = 300 turns


async def test_three_hundred_turns_stay_inside_the_window(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    key = f"long-{uuid.uuid4().hex}"
    use_config(long_config(tmp_path, key=key))
    client = lg_client()
    thread_id = (await client.threads.create())["thread_id"]
    boundaries = [0]
    for run in range(RUNS):
        result = await client.runs.wait(
            thread_id,
            "lead_agent",
            input={"messages": [{"role": "user", "content": f"request number {run}"}]},
            config={"recursion_limit": 2000},
        )
        assert result["messages"][-1]["content"] == "All steps done.", result["messages"][-1]
        boundaries.append(len(recorded_calls(key)))
    calls = recorded_calls(key)
    assert len(calls) == RUNS * STEPS_PER_RUN
    summarized = 0
    for run in range(RUNS):
        for call in calls[boundaries[run] : boundaries[run + 1]]:
            size = count_request_tokens(call.messages, call.tool_schemas)
            assert size < CONTEXT_WINDOW, size
            assert check_strict_request(call.messages) == []
            users = [m for m in call.messages if isinstance(m, HumanMessage) and not m.name]
            assert any(m.text == f"request number {run}" for m in users)
            data = [
                m
                for m in call.messages
                if (kind := read_provenance(m)) is not None
                and kind.content_kind == "durable_context_data"
            ]
            if data:
                summarized += 1
                assert isinstance(data[0], HumanMessage)
                assert "<summary>" in data[0].text
                assert not any(
                    isinstance(m, SystemMessage) and "Summary:" in m.text for m in call.messages
                )
    assert summarized > RUNS * STEPS_PER_RUN // 2
    state = await client.threads.get_state(thread_id)
    messages = state["values"]["messages"]
    summaries = [m for m in messages if m.get("name") == "summary"]
    assert len(summaries) == 1  # each compaction re-summarizes the previous summary
    assert summaries[0]["content"].startswith("Summary: the agent echoed")
    assert summaries[0]["additional_kwargs"]["deerflow_producer_kind"] == "summarization"
    # The durable block is request-only: never persisted.
    assert not any(
        (m.get("additional_kwargs") or {}).get("deerflow_content_kind") == "durable_context_data"
        for m in messages
    )
    assert len(messages) < 80
    clear_recordings(key)


async def test_plan_mode_sends_an_unfinished_plan_back_once(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    key = f"todo-{uuid.uuid4().hex}"
    todos = [
        {"content": "collect the data", "status": "completed"},
        {"content": "write the report", "status": "in_progress"},
    ]
    script = [
        ai_tools(tool_call("write_todos", todos=todos)),
        ai_text("I am done."),  # wraps up with an open todo
        ai_text("Still done."),  # after the one reminder, the run may end
    ]
    use_config(
        write_config(
            tmp_path,
            models=[recording_model_entry(script, key=key)],
            tools=[{"name": "echo", "use": "tests.support.tools:echo"}],
        )
    )
    client = lg_client()
    thread_id = (await client.threads.create())["thread_id"]
    result = await client.runs.wait(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "plan it"}]},
        config={"configurable": {"is_plan_mode": True}},
    )
    calls = recorded_calls(key)
    assert len(calls) == 3  # sent back exactly once
    reminder = calls[2].messages[-1]
    assert isinstance(reminder, HumanMessage)
    assert "unfinished items" in reminder.text and "write the report" in reminder.text
    assert result["todos"] == todos
    assert result["messages"][-1]["content"] == "Still done."
    # The reminder is request-only: not in the thread.
    assert not any("unfinished items" in str(m["content"]) for m in result["messages"])
    clear_recordings(key)


@pytest.mark.parametrize("usage", [True, False], ids=["with-token-usage", "budget-only"])
async def test_token_budget_caps_a_tool_loop_and_the_next_run_starts_fresh(
    usage: bool,
    tmp_path: Path,
    use_config: Callable[[Path], Path],
    lg_client: Callable[..., Any],
) -> None:
    key = f"budget-{uuid.uuid4().hex}"
    loop = [ai_tools(tool_call("echo", text=f"again {n}")) for n in range(40)]
    use_config(
        write_config(
            tmp_path,
            models=[recording_model_entry(loop, key=key, turn_by="calls")],
            tools=[{"name": "echo", "use": "tests.support.tools:echo"}],
            loop_detection={"enabled": False},
            token_usage={"enabled": usage},
            token_budget={"enabled": True, "max_tokens_per_run": 600},
        )
    )
    client = lg_client()
    thread_id = (await client.threads.create())["thread_id"]
    events: list[Any] = []
    async for part in client.runs.stream(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "loop"}]},
        stream_mode=["custom", "values"],
        config={"recursion_limit": 500},
    ):
        if part.event == "custom":
            events.append(part.data)
    state = (await client.threads.get_state(thread_id))["values"]
    last = state["messages"][-1]
    assert last["type"] == "ai" and not last["tool_calls"]
    assert last["additional_kwargs"]["stop_reason"] == "token_capped"
    assert "budget of 600" in last["content"]
    first_calls = len(recorded_calls(key))
    assert 1 < first_calls < 40
    carrier = "run_token_usage" if usage else "token_budget"
    budget = last["response_metadata"][carrier]
    assert budget["total_tokens" if usage else "spent"] >= 600
    assert any(e.get("type") == "middleware:token_budget" for e in events if isinstance(e, dict))
    if usage:
        # Usage per run: state, the final answer's metadata and an event at run end.
        (run_usage,) = state["token_usage"].values()
        assert run_usage["calls"] == first_calls
        assert run_usage["total_tokens"] == budget["total_tokens"]
        assert any(e.get("type") == "token_usage" for e in events if isinstance(e, dict))
    else:
        assert not state.get("token_usage"), state.get("token_usage")

    await client.runs.wait(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "once more"}]},
        config={"recursion_limit": 500},
    )
    second = (await client.threads.get_state(thread_id))["values"]
    fresh = second["messages"][-1]["response_metadata"][carrier]
    assert fresh["run_id"] != budget["run_id"]
    if usage:
        assert len(second["token_usage"]) == 2
    assert len(recorded_calls(key)) > first_calls + 1  # a fresh budget allowed new steps
    clear_recordings(key)


async def test_delegation_results_stay_visible_after_compaction(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    key = f"deleg-{uuid.uuid4().hex}"
    task = {
        "name": "task",
        "args": {
            "description": "count widgets",
            "prompt": "count",
            "subagent_type": "general-purpose",
        },
    }
    lead = [ai_tools(task), *run_script(40)]
    use_config(
        write_config(
            tmp_path,
            models=[
                recording_model_entry(
                    lead, key=key, turn_by="calls", context_window=CONTEXT_WINDOW
                ),
                scripted_model_entry([ai_text("The child found 42 widgets.")], name="worker"),
                scripted_model_entry(
                    [ai_text("Summary: work happened.")],
                    name="summarizer",
                    turn_by="calls",
                    cycle_from=0,
                ),
            ],
            tools=[{"name": "echo", "use": "tests.support.tools:echo"}],
            subagents={"model": "worker"},
            loop_detection={"enabled": False},
            summarization={
                "enabled": True,
                "model": "summarizer",
                "trigger_fraction": 0.6,
                "keep_fraction": 0.25,
            },
        )
    )
    client = lg_client()
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "delegate then work"}]},
        config={"recursion_limit": 2000},
    )
    calls = recorded_calls(key)
    assert len(calls) == 41
    last = calls[-1]
    assert not any(isinstance(m, ToolMessage) and "42 widgets" in m.text for m in last.messages)
    blocks = [m for m in last.messages if "42 widgets" in m.text]
    assert len(blocks) == 1 and isinstance(blocks[0], HumanMessage)
    assert blocks[0].additional_kwargs["deerflow_content_kind"] == "durable_context_data"
    assert not any("42 widgets" in m.text for m in last.system_messages)
    state = (await client.threads.get_state(thread_id))["values"]
    assert not any("42 widgets" in str(m["content"]) for m in state["messages"])
    assert state["delegations"][0]["summary"].startswith("The child found 42 widgets")
    clear_recordings(key)
