"""Black box: remote subagents under ``langgraph dev`` with owner-isolating auth."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import NotFoundError

from subagents.contract import KEY_CHILD_RUN_ID, KEY_CHILD_THREAD_ID, KEY_STATUS
from tests.support.delegation import delegation_config, task_call
from tests.support.scripted import ai_text, ai_tools, tool_call
from tests.support.server import PROJECT_ROOT, DevServer, langgraph_json

ALICE = {"Authorization": "Bearer user-alice"}
BOB = {"Authorization": "Bearer user-bob"}
USER_INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}


def dev_config(tmp_path: Path) -> Path:
    """langgraph.json for the project, plus the test auth (absolute paths)."""
    config = langgraph_json()
    config["graphs"] = {
        name: str(PROJECT_ROOT / spec.removeprefix("./")) for name, spec in config["graphs"].items()
    }
    config["dependencies"] = [str(PROJECT_ROOT)]
    config.pop("http", None)
    config.pop("env", None)
    config["auth"] = {"path": str(PROJECT_ROOT / "tests/support/subagent_auth.py") + ":auth"}
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


async def test_remote_subagents_belong_to_the_caller(
    dev_server: Callable[..., DevServer], tmp_path: Path
) -> None:
    config = delegation_config(
        tmp_path,
        lead=[ai_tools(task_call("find it"), tool_call("echo", text="x")), ai_text("lead done")],
        worker=[ai_tools(tool_call("echo", text="y")), ai_text("found it")],
        execution="remote",
        timeout_seconds=60,
    )
    # `langgraph dev` runs one job at a time by default; the parent run holds it
    # while its child waits in the queue, so remote mode needs more slots.
    server = await asyncio.to_thread(
        dev_server,
        env={"DEERFLOW_CONFIG": str(config)},
        args=["--config", str(dev_config(tmp_path)), "--n-jobs-per-worker", "4"],
    )
    alice, bob = server.client(headers=ALICE), server.client(headers=BOB)
    thread = await alice.threads.create()
    async with asyncio.timeout(120):
        values: Any = await alice.runs.wait(thread["thread_id"], "lead_agent", input=USER_INPUT)
    assert values["messages"][-1]["content"] == "lead done", server.log()
    result = next(m for m in values["messages"] if m.get("name") == "task")
    kwargs = result["additional_kwargs"]
    assert kwargs[KEY_STATUS] == "completed"
    assert result["content"].endswith("found it")
    child_thread, child_run = kwargs[KEY_CHILD_THREAD_ID], kwargs[KEY_CHILD_RUN_ID]

    # The child thread and run are Alice's and point back at her thread.
    child: Any = await alice.threads.get(child_thread)
    assert child["metadata"]["owner"] == "alice"
    assert child["metadata"]["deerflow_parent_thread_id"] == thread["thread_id"]
    run = await alice.runs.get(child_thread, child_run)
    assert run["status"] == "success"
    (entry,) = values["delegations"]
    assert (entry["child_thread_id"], entry["child_run_id"]) == (child_thread, child_run)

    # Bob can neither see nor reach them.
    with pytest.raises(NotFoundError):
        await bob.threads.get(child_thread)
    with pytest.raises(NotFoundError):
        await bob.runs.get(child_thread, child_run)
    found = await bob.threads.search(metadata={"deerflow_parent_thread_id": thread["thread_id"]})
    assert found == []
    assert [
        t["thread_id"]
        for t in await alice.threads.search(
            metadata={"deerflow_parent_thread_id": thread["thread_id"]}
        )
    ] == [child_thread]

    # A forged delegation token is refused.
    async with httpx.AsyncClient(base_url=server.url) as http:
        response = await http.post(
            "/threads", json={}, headers={"Authorization": "DeerflowDelegation dfd1.e30.forged"}
        )
    assert response.status_code == 401
    assert "blocking" not in server.log().lower()
