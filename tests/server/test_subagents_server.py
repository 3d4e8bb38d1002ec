"""Subagents through the real LangGraph Server (in-process ASGI), both execution modes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.tokens import mint_token
from subagents.contract import (
    KEY_CHILD_RUN_ID,
    KEY_CHILD_THREAD_ID,
    KEY_MODEL_NAME,
    KEY_STATUS,
    KEY_TOKEN_USAGE,
)
from tests.support.delegation import delegation_config, streaming_client, task_call
from tests.support.scripted import ai_text, ai_tools, scripted_model_entry, tool_call
from tests.support.subagent_tools import GATES, HANGS, reset_boards, wait_until

USER_INPUT = {"messages": [{"role": "user", "content": "go"}]}


@pytest.fixture(autouse=True)
def _boards() -> Iterator[None]:
    reset_boards()
    yield
    reset_boards()


async def stream_run(
    client: Any, thread_id: str, events: list[dict[str, Any]], **kwargs: Any
) -> dict[str, Any]:
    """Stream a lead run; custom events go to ``events``; returns the final values."""
    values: dict[str, Any] = {}
    async for part in client.runs.stream(
        thread_id, "lead_agent", input=USER_INPUT, stream_mode=["custom", "values"], **kwargs
    ):
        if part.event == "custom":
            events.append(part.data)
        elif part.event == "values":
            values = part.data
        elif part.event == "error":
            raise AssertionError(f"run failed: {part.data}")
    return values


def tool_results(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in values["messages"] if m["type"] == "tool"]


async def test_three_tasks_run_at_most_two_at_once_with_live_events(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    use_config(
        delegation_config(
            tmp_path,
            lead=[ai_tools(*(task_call(f"part {i}") for i in range(3))), ai_text("lead done")],
            worker=[ai_tools(tool_call("gate", key="srv")), ai_text("worker done")],
            max_concurrent_subagents=2,
        )
    )
    client = streaming_client(lg_server)
    thread = await client.threads.create()
    events: list[dict[str, Any]] = []
    running = asyncio.create_task(stream_run(client, thread["thread_id"], events))
    await wait_until(lambda: "srv" in GATES and GATES["srv"].active >= 2)
    board = GATES["srv"]
    # The events arrive live: all three started, two running, while they wait.
    await wait_until(lambda: sum(e["type"] == "task_started" for e in events) == 3)
    assert sum(e["type"] == "task_running" and e["step"] == 0 for e in events) == 2
    assert board.entered == 2
    board.release(1)
    await wait_until(lambda: board.entered == 3)
    board.release(2)
    values = await asyncio.wait_for(running, 60)

    assert board.max_active == 2
    assert values["messages"][-1]["content"] == "lead done"
    results = tool_results(values)
    assert [r["additional_kwargs"][KEY_STATUS] for r in results] == ["completed"] * 3
    for result in results:
        kinds = [e["type"] for e in events if e.get("task_id") == result["tool_call_id"]]
        assert kinds[0] == "task_started"
        assert kinds[-1] == "task_completed"
    assert {e["status"] for e in values["delegations"]} == {"completed"}


async def test_failed_and_timed_out_subagents_and_the_lead_finishes(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    use_config(
        delegation_config(
            tmp_path,
            lead=[
                ai_tools(
                    task_call("explode", subagent_type="boom"),
                    task_call("wait", subagent_type="slow"),
                ),
                ai_text("lead done"),
            ],
            extra_models=[
                {"name": "broken", "use": "tests.support.subagent_tools:ExplodingChatModel"},
                scripted_model_entry([ai_tools(tool_call("hang", key="srv-t"))], name="hanger"),
            ],
            types=[
                {"name": "boom", "description": "d", "system_prompt": "p", "model": "broken"},
                {
                    "name": "slow",
                    "description": "d",
                    "system_prompt": "p",
                    "model": "hanger",
                    "timeout_seconds": 0.3,
                },
            ],
        )
    )
    client = streaming_client(lg_server)
    thread = await client.threads.create()
    events: list[dict[str, Any]] = []
    values = await stream_run(client, thread["thread_id"], events)
    assert values["messages"][-1]["content"] == "lead done"
    statuses = [r["additional_kwargs"][KEY_STATUS] for r in tool_results(values)]
    assert statuses == ["failed", "timed_out"]
    assert {e["type"] for e in events} >= {"task_failed", "task_timed_out"}
    assert HANGS["srv-t"].cancelled == 1


async def test_cancelling_the_parent_run_stops_its_subagents(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    use_config(
        delegation_config(
            tmp_path,
            lead=[ai_tools(task_call("wait")), ai_text("unused"), ai_text("next turn")],
            worker=[ai_tools(tool_call("hang", key="srv-c"))],
        )
    )
    client = streaming_client(lg_server)
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=USER_INPUT)
    await wait_until(lambda: "srv-c" in HANGS and HANGS["srv-c"].entered == 1)
    await client.runs.cancel(thread_id, run["run_id"], wait=True)
    await wait_until(lambda: HANGS["srv-c"].cancelled == 1)
    assert (await client.runs.get(thread_id, run["run_id"]))["status"] == "interrupted"
    # The dispatched delegation was captured before the task ran; the next run
    # of the thread closes it as cancelled.
    state = await client.threads.get_state(thread_id)
    (entry,) = state["values"]["delegations"]
    assert entry["status"] == "pending"
    await client.runs.wait(thread_id, "lead_agent", input=USER_INPUT)
    state = await client.threads.get_state(thread_id)
    (entry,) = state["values"]["delegations"]
    assert entry["status"] == "cancelled"


async def test_run_total_strips_the_excess_and_a_later_run_has_a_fresh_budget(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    use_config(
        delegation_config(
            tmp_path,
            lead=[
                ai_tools(*(task_call(f"a{i}") for i in range(3))),
                ai_text("first answer"),
                ai_tools(task_call("b0"), task_call("b1")),
                ai_text("second answer"),
            ],
            max_total_per_run=2,
        )
    )
    client = streaming_client(lg_server)
    thread_id = (await client.threads.create())["thread_id"]
    first = await client.runs.wait(thread_id, "lead_agent", input=USER_INPUT)
    planning = first["messages"][1]
    assert len(planning["tool_calls"]) == 2
    assert "[Subagent limit] 1 task call was not run" in planning["content"]
    assert planning["response_metadata"]["finish_reason"] == "stop"
    assert first["messages"][-1]["content"] == "first answer"
    second = await client.runs.wait(thread_id, "lead_agent", input=USER_INPUT)
    assert second["messages"][-1]["content"] == "second answer"
    assert len(tool_results(second)) == 4
    runs = [e["run_id"] for e in second["delegations"]]
    assert len(set(runs)) == 2 and len(runs) == 4


def remote_pair(tmp_path: Path, **subagents: Any) -> Path:
    return delegation_config(
        tmp_path,
        lead=[
            ai_tools(task_call("echo something"), task_call("explode", subagent_type="boom")),
            ai_text("lead done"),
        ],
        worker=[ai_tools(tool_call("echo", text="x")), ai_text("worker result")],
        extra_models=[{"name": "broken", "use": "tests.support.subagent_tools:ExplodingChatModel"}],
        types=[{"name": "boom", "description": "d", "system_prompt": "p", "model": "broken"}],
        **subagents,
    )


async def test_remote_mode_matches_in_process_and_links_the_child(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    client = streaming_client(lg_server)
    outcomes: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]] = {}
    for mode in ("inprocess", "remote"):
        directory = tmp_path / mode
        # The in-process server's blocking-call detector watches this loop too.
        await asyncio.to_thread(directory.mkdir)
        use_config(await asyncio.to_thread(remote_pair, directory, execution=mode))
        thread_id = (await client.threads.create())["thread_id"]
        events: list[dict[str, Any]] = []
        values = await stream_run(client, thread_id, events)
        outcomes[mode] = (tool_results(values), events, {"thread_id": thread_id, **values})

    def facts(result: dict[str, Any]) -> tuple[Any, ...]:
        kwargs = result["additional_kwargs"]
        return (
            result["content"],
            kwargs[KEY_STATUS],
            kwargs.get(KEY_MODEL_NAME),
            kwargs.get(KEY_TOKEN_USAGE),
        )

    local, remote = outcomes["inprocess"], outcomes["remote"]
    assert [facts(r) for r in remote[0]] == [facts(r) for r in local[0]]
    assert [r["additional_kwargs"][KEY_STATUS] for r in remote[0]] == ["completed", "failed"]
    assert "model exploded" in remote[0][1]["content"]

    def kinds(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return sorted({(e["task_id"], e["type"]) for e in events})

    assert kinds(remote[1]) == kinds(local[1])
    assert all(e["execution"] == "remote" for e in remote[1] if "execution" in e)

    # The parent's state links each child thread and run; the child knows its parent.
    parent = remote[2]
    for result in remote[0]:
        kwargs = result["additional_kwargs"]
        child_thread = await client.threads.get(kwargs[KEY_CHILD_THREAD_ID])
        assert child_thread["metadata"]["deerflow_parent_thread_id"] == parent["thread_id"]
        assert child_thread["metadata"]["deerflow_task_id"] == result["tool_call_id"]
        child_run = await client.runs.get(kwargs[KEY_CHILD_THREAD_ID], kwargs[KEY_CHILD_RUN_ID])
        assert child_run["metadata"]["deerflow_parent_thread_id"] == parent["thread_id"]
        entry = next(
            e for e in parent["delegations"] if e["tool_call_id"] == result["tool_call_id"]
        )
        assert entry["child_thread_id"] == kwargs[KEY_CHILD_THREAD_ID]
        assert entry["child_run_id"] == kwargs[KEY_CHILD_RUN_ID]
        assert entry["execution"] == "remote"
    ok_child = remote[0][0]["additional_kwargs"]
    child_state = await client.threads.get_state(ok_child[KEY_CHILD_THREAD_ID])
    assert child_state["values"]["messages"][-1]["content"] == "worker result"


async def test_remote_timeout_cancels_the_child_run(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    use_config(
        delegation_config(
            tmp_path,
            lead=[ai_tools(task_call("wait")), ai_text("lead done")],
            worker=[ai_tools(tool_call("hang", key="srv-r"))],
            execution="remote",
            timeout_seconds=2.0,
        )
    )
    client = streaming_client(lg_server)
    thread_id = (await client.threads.create())["thread_id"]
    values = await client.runs.wait(thread_id, "lead_agent", input=USER_INPUT)
    (result,) = tool_results(values)
    kwargs = result["additional_kwargs"]
    assert kwargs[KEY_STATUS] == "timed_out"
    assert values["messages"][-1]["content"] == "lead done"
    # The child run was cancelled on the server (whether or not the queue had
    # started it yet); if it had reached the tool, the tool saw the cancellation.
    thread, run_id = kwargs[KEY_CHILD_THREAD_ID], kwargs[KEY_CHILD_RUN_ID]
    statuses: list[str] = []

    async def child_status() -> str:
        statuses.append((await client.runs.get(thread, run_id))["status"])
        return statuses[-1]

    async with asyncio.timeout(30):
        while await child_status() != "interrupted":  # noqa: ASYNC110 - polling the server
            await asyncio.sleep(0.05)
    board = HANGS.get("srv-r")
    if board is not None:
        await wait_until(lambda: board.cancelled == board.entered)


async def test_the_subagent_graph_runs_on_its_own(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    use_config(
        delegation_config(
            tmp_path,
            lead=[ai_text("lead")],
            worker=[ai_tools(tool_call("echo", text="hi")), ai_text("standalone result")],
        )
    )
    client = streaming_client(lg_server)
    assistants = await client.assistants.search(graph_id="subagent")
    assert assistants
    values = await client.runs.wait(
        None, "subagent", input=USER_INPUT, context={"model_name": "worker"}
    )
    assert values["messages"][-1]["content"] == "standalone result"
    assert [m["type"] for m in values["messages"]] == ["human", "ai", "tool", "ai"]
    with pytest.raises(Exception, match="unknown subagent_type 'wizard'"):
        await client.runs.wait(
            None, "subagent", input=USER_INPUT, context={"subagent_type": "wizard"}
        )


async def test_cancelling_the_parent_run_cancels_its_remote_children(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    use_config(
        delegation_config(
            tmp_path,
            lead=[ai_tools(task_call("wait")), ai_text("unused")],
            worker=[ai_tools(tool_call("hang", key="srv-rc"))],
            execution="remote",
        )
    )
    client = streaming_client(lg_server)
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(thread_id, "lead_agent", input=USER_INPUT)
    await wait_until(lambda: "srv-rc" in HANGS and HANGS["srv-rc"].entered == 1)
    children = await client.threads.search(metadata={"deerflow_parent_thread_id": thread_id})
    (child,) = children
    await client.runs.cancel(thread_id, run["run_id"], wait=True)
    await wait_until(lambda: HANGS["srv-rc"].cancelled == 1)
    async with asyncio.timeout(30):
        while True:
            (child_run,) = await client.runs.list(child["thread_id"])
            if child_run["status"] != "running":
                break
            await asyncio.sleep(0.05)
    assert child_run["status"] == "interrupted"


async def test_remote_children_belong_to_the_caller_and_stay_hidden_from_others(
    lg_server: Any, use_config: Callable[[Path], Path], tmp_path: Path
) -> None:
    secret = "subagent-test-secret-" + "x" * 40
    use_config(
        delegation_config(
            tmp_path,
            lead=[ai_tools(task_call("find it")), ai_text("lead done")],
            worker=[ai_tools(tool_call("echo", text="y")), ai_text("found it")],
            execution="remote",
            auth={"mode": "jwt", "jwt": {"secret": secret}},
        )
    )

    def user(name: str) -> Any:
        return streaming_client(
            lg_server, headers={"Authorization": f"Bearer {mint_token(secret, name)}"}
        )

    alice, bob = user("alice"), user("bob")
    thread_id = (await alice.threads.create())["thread_id"]
    values = await alice.runs.wait(thread_id, "lead_agent", input=USER_INPUT)
    (result,) = tool_results(values)
    kwargs = result["additional_kwargs"]
    assert kwargs[KEY_STATUS] == "completed", result["content"]
    child_thread, child_run = kwargs[KEY_CHILD_THREAD_ID], kwargs[KEY_CHILD_RUN_ID]

    child = await alice.threads.get(child_thread)
    assert child["metadata"]["owner"] == "alice"
    assert child["metadata"]["deerflow_parent_thread_id"] == thread_id
    assert (await alice.runs.get(child_thread, child_run))["status"] == "success"
    linked = await alice.threads.search(metadata={"deerflow_parent_thread_id": thread_id})
    assert [t["thread_id"] for t in linked] == [child_thread]

    for attempt in (bob.threads.get(child_thread), bob.runs.get(child_thread, child_run)):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await attempt
        assert refused.value.response.status_code == 404
    assert await bob.threads.search(metadata={"deerflow_parent_thread_id": thread_id}) == []

    forged = streaming_client(lg_server, headers={"Authorization": "DeerflowDelegation dfd1.e30.x"})
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await forged.threads.search()
    assert refused.value.response.status_code == 401
