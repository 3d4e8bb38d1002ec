"""Black box: remote subagents under ``langgraph dev`` with the project's jwt auth."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.tokens import mint_token
from subagents.contract import KEY_CHILD_RUN_ID, KEY_CHILD_THREAD_ID, KEY_STATUS
from tests.support.delegation import delegation_config, task_call
from tests.support.scripted import ai_text, ai_tools, tool_call
from tests.support.server import DevServer

pytestmark = pytest.mark.blackbox

SECRET = "subagent-dev-secret-" + "d" * 40
USER_INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, name)}"}


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
    server = dev_server(
        env={"DEERFLOW_CONFIG": str(config), "DEERFLOW_AUTH_JWT_SECRET": SECRET},
        args=["--n-jobs-per-worker", "4"],
    )
    alice, bob = server.client(headers=bearer("alice")), server.client(headers=bearer("bob"))
    thread = await alice.threads.create()
    async with asyncio.timeout(120):
        values: Any = await alice.runs.wait(thread["thread_id"], "lead_agent", input=USER_INPUT)
    assert values["messages"][-1]["content"] == "lead done", await server.alog()
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
    for attempt in (bob.threads.get(child_thread), bob.runs.get(child_thread, child_run)):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await attempt
        assert refused.value.response.status_code == 404
    found = await bob.threads.search(metadata={"deerflow_parent_thread_id": thread["thread_id"]})
    assert found == []

    # A forged delegation token is refused.
    async with httpx.AsyncClient(base_url=server.url) as http:
        response = await http.post(
            "/threads/search",
            json={},
            headers={"Authorization": "DeerflowDelegation dfd1.e30.forged"},
        )
    assert response.status_code == 401
    assert "blockingerror" not in (await server.alog()).lower()
