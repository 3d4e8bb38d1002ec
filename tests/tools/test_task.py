"""The ``task`` tool through real lead-agent graphs with scripted models (in-process)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from graphs.lead_agent import build_lead_agent
from runtime.config import load_settings
from subagents.contract import KEY_MODEL_NAME, KEY_STATUS, KEY_STOP_REASON, KEY_TOKEN_USAGE
from tests.support.delegation import delegation_config, run_lead, task_call
from tests.support.scripted import ai_text, ai_tools, scripted_model_entry, tool_call
from tests.support.subagent_tools import GATES, HANGS, SEEN, reset_boards, wait_until


@pytest.fixture(autouse=True)
def _boards() -> Iterator[None]:
    reset_boards()
    yield
    reset_boards()


def _exploding_model(name: str = "broken") -> dict[str, Any]:
    return {"name": name, "use": "tests.support.subagent_tools:ExplodingChatModel"}


def tools_of(graph: Any) -> dict[str, Any]:
    tools: dict[str, Any] = graph.nodes["tools"].bound.tools_by_name
    return tools


def _statuses(run: Any) -> dict[str, str]:
    return {m.tool_call_id: m.additional_kwargs.get(KEY_STATUS) for m in run.tool_messages()}


async def test_three_tasks_complete_with_at_most_two_running(tmp_path: Path) -> None:
    path = delegation_config(
        tmp_path,
        lead=[
            ai_tools(*(task_call(f"part {i}") for i in range(3))),
            ai_text("lead done"),
        ],
        worker=[ai_tools(tool_call("gate", key="c")), ai_text("worker done")],
        max_concurrent_subagents=2,
    )
    events: list[dict[str, Any]] = []
    running = asyncio.create_task(run_lead(path, events=events))
    await wait_until(lambda: "c" in GATES and GATES["c"].active >= 2)
    board = GATES["c"]
    # All three were dispatched; only two hold a slot.
    await wait_until(lambda: sum(e["type"] == "task_started" for e in events) == 3)
    assert board.entered == 2
    board.release(1)
    await wait_until(lambda: board.entered == 3)
    board.release(2)
    run = await asyncio.wait_for(running, 30)

    assert board.max_active == 2
    assert board.left == 3
    assert run.values["messages"][-1].content == "lead done"
    ids = [m.tool_call_id for m in run.tool_messages()]
    assert len(ids) == 3
    assert set(_statuses(run).values()) == {"completed"}
    for task_id in ids:
        kinds = run.events_of(task_id)
        assert kinds[0] == "task_started"
        assert kinds[1] == "task_running"
        assert kinds[-1] == "task_completed"
    # The third task got its slot only after one of the first two completed.
    first_done = next(i for i, e in enumerate(events) if e["type"] == "task_completed")
    slot_events = [
        i for i, e in enumerate(events) if e["type"] == "task_running" and e["step"] == 0
    ]
    assert len(slot_events) == 3
    assert sum(i < first_done for i in slot_events) == 2


async def test_results_carry_status_model_and_usage(tmp_path: Path) -> None:
    path = delegation_config(
        tmp_path,
        lead=[ai_tools(task_call("summarise")), ai_text("lead done")],
        worker=[ai_tools(tool_call("echo", text="x")), ai_text("the summary")],
    )
    run = await run_lead(path)
    (message,) = run.tool_messages()
    kwargs = message.additional_kwargs
    assert kwargs[KEY_STATUS] == "completed"
    assert kwargs[KEY_MODEL_NAME] == "worker"
    usage = kwargs[KEY_TOKEN_USAGE]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0
    assert message.status == "success"
    assert message.content.startswith("Task completed by subagent 'general-purpose'")
    assert message.content.endswith("the summary")
    completed = [e for e in run.events if e["type"] == "task_completed"]
    assert completed[0]["token_usage"] == usage
    assert completed[0]["result"] == "the summary"
    progress = [e for e in run.events if e["type"] == "task_running" and e["step"] > 0]
    assert [e["tool_calls"] for e in progress] == [["echo"], []]
    assert progress[-1]["message"] == "the summary"
    (entry,) = run.values["delegations"]
    assert entry["status"] == "completed"
    assert entry["summary"] == "the summary"


async def test_failed_and_timed_out_subagents_do_not_stop_the_lead(tmp_path: Path) -> None:
    path = delegation_config(
        tmp_path,
        lead=[
            ai_tools(
                task_call("explode", subagent_type="boom"),
                task_call("wait forever", subagent_type="slow"),
                task_call("fine"),
            ),
            ai_text("lead done"),
        ],
        worker=[ai_text("worker done")],
        extra_models=[
            _exploding_model(),
            scripted_model_entry([ai_tools(tool_call("hang", key="t"))], name="hanger"),
        ],
        types=[
            {"name": "boom", "description": "fails", "system_prompt": "x", "model": "broken"},
            {
                "name": "slow",
                "description": "hangs",
                "system_prompt": "x",
                "model": "hanger",
                "timeout_seconds": 0.3,
            },
        ],
    )
    run = await run_lead(path)
    assert run.values["messages"][-1].content == "lead done"
    by_type = {m.additional_kwargs["subagent_type"]: m for m in run.tool_messages()}
    assert by_type["boom"].additional_kwargs[KEY_STATUS] == "failed"
    assert "model exploded" in by_type["boom"].content
    assert by_type["boom"].status == "error"
    assert by_type["slow"].additional_kwargs[KEY_STATUS] == "timed_out"
    assert by_type["slow"].content.startswith("Task timed out")
    assert by_type["general-purpose"].additional_kwargs[KEY_STATUS] == "completed"
    assert HANGS["t"].cancelled == 1
    kinds = {e["subagent_type"]: e["type"] for e in run.events if e["type"] != "task_running"}
    assert kinds == {
        "boom": "task_failed",
        "slow": "task_timed_out",
        "general-purpose": "task_completed",
    }
    statuses = {e["subagent_type"]: e["status"] for e in run.values["delegations"]}
    assert statuses == {"boom": "failed", "slow": "timed_out", "general-purpose": "completed"}


async def test_unknown_type_and_empty_prompt_are_error_results(tmp_path: Path) -> None:
    path = delegation_config(
        tmp_path,
        lead=[
            ai_tools(
                task_call("x", subagent_type="wizard"),
                tool_call("task", description="d", prompt="  ", subagent_type="general-purpose"),
            ),
            ai_text("lead done"),
        ],
    )
    run = await run_lead(path)
    unknown, empty = run.tool_messages()
    assert unknown.additional_kwargs[KEY_STATUS] == "failed"
    assert "Unknown subagent type 'wizard'" in unknown.content
    assert "general-purpose" in unknown.content
    assert empty.additional_kwargs[KEY_STATUS] == "failed"
    assert "prompt is empty" in empty.content
    assert run.values["messages"][-1].content == "lead done"


async def test_turn_limit_caps_a_subagent(tmp_path: Path) -> None:
    looping = [ai_tools(tool_call("echo", text="x"), content="partial finding")] * 5
    path = delegation_config(
        tmp_path,
        lead=[ai_tools(task_call("loop", subagent_type="short")), ai_text("lead done")],
        extra_models=[scripted_model_entry(looping, name="looper")],
        types=[
            {
                "name": "short",
                "description": "one turn",
                "system_prompt": "x",
                "model": "looper",
                "max_turns": 1,
            }
        ],
    )
    run = await run_lead(path)
    (message,) = run.tool_messages()
    assert message.additional_kwargs[KEY_STATUS] == "completed"
    assert message.additional_kwargs[KEY_STOP_REASON] == "turn_capped"
    assert "stopped early" in message.content
    assert message.content.endswith("partial finding")
    model_turns = [e for e in run.events if e["type"] == "task_running" and e["step"] > 0]
    assert len(model_turns) == 1


async def test_cancelling_the_parent_cancels_its_subagent(tmp_path: Path) -> None:
    path = delegation_config(
        tmp_path,
        lead=[ai_tools(task_call("wait")), ai_text("lead done")],
        worker=[ai_tools(tool_call("hang", key="p"))],
    )
    events: list[dict[str, Any]] = []
    running = asyncio.create_task(run_lead(path, events=events))
    await wait_until(lambda: "p" in HANGS and HANGS["p"].entered == 1)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert HANGS["p"].cancelled == 1
    # The run's stream is gone with it, so no terminal event is promised; none
    # claims the task finished.
    assert not any(e["type"] in {"task_completed", "task_failed"} for e in events)


async def test_subagent_shares_identity_thread_and_sandbox_but_not_checkpoints(
    tmp_path: Path,
) -> None:
    class User:
        identity = "alice"
        permissions: list[str] = []

    path = delegation_config(
        tmp_path,
        lead=[ai_tools(tool_call("whoami"), task_call("who am i")), ai_text("lead done")],
        worker=[ai_tools(tool_call("whoami")), ai_text("worker done")],
    )
    saver = InMemorySaver()
    thread_data = {"user_id": "alice", "workspace_path": "/mnt/user-data/workspace"}
    run = await run_lead(
        path,
        thread_id="thread-1",
        checkpointer=saver,
        configurable={"langgraph_auth_user": User(), "langgraph_auth_user_id": "alice"},
        state={"sandbox": {"sandbox_id": "sb-1"}, "thread_data": thread_data},
    )
    lead_seen, child_seen = SEEN
    assert child_seen["identity"] == lead_seen["identity"] == "alice"
    assert child_seen["auth_user_id"] == "alice"
    assert child_seen["thread_id"] == "thread-1"
    assert child_seen["sandbox"] == {"sandbox_id": "sb-1"}
    # ThreadDataMiddleware resolved the parent's real paths for (alice, thread-1)
    # over the state sent in; the child sees exactly the parent's.
    assert child_seen["thread_data"] == lead_seen["thread_data"]
    assert child_seen["thread_data"]["user_id"] == "alice"
    assert child_seen["thread_data"]["thread_id"] == "thread-1"
    assert child_seen["thread_data"]["workspace_path"].endswith(
        "users/alice/threads/thread-1/user-data/workspace"
    )
    # Only the parent's own namespace was checkpointed, and none of the child's
    # messages entered the parent's history.
    assert set(saver.storage["thread-1"]) == {""}
    contents = [m.content for m in run.values["messages"]]
    assert "worker done" not in contents
    assert "who am i" not in contents


def test_task_tool_offered_only_when_subagents_are_enabled(tmp_path: Path) -> None:
    def tool_names(settings: Any, configurable: dict[str, Any]) -> set[str]:
        graph = build_lead_agent(settings, {"configurable": configurable})
        return set(tools_of(graph))

    on = load_settings(delegation_config(tmp_path, lead=[ai_text("x")]))
    assert "task" in tool_names(on, {})
    assert "task" not in tool_names(on, {"subagent_enabled": False})
    off_dir = tmp_path / "off"
    off_dir.mkdir()
    off = load_settings(delegation_config(off_dir, lead=[ai_text("x")], enabled=False))
    assert "task" not in tool_names(off, {"subagent_enabled": True})


def test_description_lists_available_types(tmp_path: Path) -> None:
    tools = [
        {"name": "echo", "group": "test", "use": "tests.support.tools:echo"},
    ]
    path = delegation_config(
        tmp_path,
        lead=[ai_text("x")],
        tools=tools,
        types=[{"name": "researcher", "description": "Digs deep.", "system_prompt": "x"}],
    )
    graph = build_lead_agent(load_settings(path), None)
    description = tools_of(graph)["task"].description
    assert "- general-purpose:" in description
    assert "- researcher: Digs deep." in description
    assert "- bash:" not in description  # no shell or file tools configured
    with_bash = tmp_path / "bash"
    with_bash.mkdir()
    tools.append({"name": "bash", "group": "sandbox", "use": "tests.support.tools:echo"})
    path = delegation_config(with_bash, lead=[ai_text("x")], tools=tools)
    graph = build_lead_agent(load_settings(path), None)
    assert "- bash:" in tools_of(graph)["task"].description
