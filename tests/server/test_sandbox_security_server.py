"""Issue 13 items 2, 5, 6 and 7 through the real LangGraph Server (in-process, jwt mode).

Alice's agent runs real ``bash`` commands with the local provider and tries
what the red team did: read the server's environment and processes, list
other users' directories, leave a process behind. A catastrophic regular
expression in ``grep`` stops at its limit while ``/ok`` answers, and a
``replace_all`` bomb is refused.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from auth.tokens import mint_token
from sandbox.isolation import probe_namespaces
from tests.support.processes import host_processes, wait_gone
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.support.server import asgi_client

pytestmark = pytest.mark.server

SECRET = "jwt-secret-for-the-sandbox-attack-test-0123456789"
WS = "/mnt/user-data/workspace"
TOOLS = [
    {"name": "bash", "group": "sandbox", "use": "tools.sandbox:bash"},
    {"name": "write_file", "group": "files", "use": "tools.files:write_file"},
    {"name": "read_file", "group": "files", "use": "tools.files:read_file"},
    {"name": "str_replace", "group": "files", "use": "tools.files:str_replace"},
    {"name": "grep", "group": "files", "use": "tools.files:grep"},
]
_REASON, _ = probe_namespaces()
USER_INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}


def _call(name: str, **args: Any) -> dict[str, Any]:
    return tool_call(name, description=f"{name} for the test", **args)


def _user(app: Any, name: str) -> Any:
    return asgi_client(app, headers={"Authorization": f"Bearer {mint_token(SECRET, name)}"})


async def _tool_results(client: Any, thread_id: str) -> list[dict[str, Any]]:
    state = await client.threads.get_state(thread_id)
    return [m for m in state["values"]["messages"] if m["type"] == "tool"]


@pytest.mark.skipif(_REASON is not None, reason=str(_REASON))
async def test_the_agents_shell_cannot_reach_the_server_or_other_users(
    tmp_path: Path, use_config: Any, lg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_SECRET", SECRET)
    marker = f"{500 + os.getpid() % 1000}.25"
    script = [
        ai_tools(_call("bash", command="env; ls /proc | grep -c '^[0-9]'; ps -e")),
        ai_tools(_call("bash", command="ls /mnt /mnt/user-data/..; find / -name 'bob-*' -xdev")),
        ai_tools(_call("bash", command=f"setsid sleep {marker} & (sleep {marker} &); echo left")),
        ai_tools(_call("bash", command="for i in $(seq 64); do sleep 2 & done 2>&1; wait")),
        ai_text("tried"),
    ]
    use_config(
        write_config(
            tmp_path,
            script,
            tools=TOOLS,
            auth={"mode": "jwt", "jwt": {"secret": SECRET}},
            sandbox={"limits": {"max_processes": 32}},
        )
    )
    bob_file = tmp_path / "data/users/bob/threads/t/user-data/workspace/bob-notes.txt"
    await asyncio.to_thread(bob_file.parent.mkdir, parents=True)
    await asyncio.to_thread(bob_file.write_text, "bob's words")
    alice = _user(lg_server, "alice")
    thread = (await alice.threads.create())["thread_id"]
    await alice.runs.wait(thread, "lead_agent", input=USER_INPUT)
    results = [str(m["content"]) for m in await _tool_results(alice, thread)]
    assert len(results) == 4, results
    env_out, dirs_out, left_out, many_out = results
    assert "USER=sandbox" in env_out, env_out  # the command really ran, in the sandbox
    assert SECRET not in env_out and "DEERFLOW_AUTH" not in env_out
    assert "pytest" not in env_out and "python" not in env_out
    assert "user-data" in dirs_out, dirs_out
    assert "bob" not in dirs_out and str(tmp_path) not in dirs_out
    assert "left" in left_out
    await wait_gone(f"sleep {marker}")
    assert "Resource temporarily unavailable" in many_out, "the process limit holds"


async def test_a_catastrophic_grep_stops_at_its_limit_while_ok_answers(
    tmp_path: Path, use_config: Any, lg_server: Any
) -> None:
    script = [
        ai_tools(_call("write_file", path="redos.txt", content="a" * 34 + "!\n")),
        ai_tools(_call("grep", pattern="(a+)+$", path=WS)),
        ai_tools(_call("write_file", path="seed.txt", content="a" * 20000)),
        ai_tools(_call("read_file", path="seed.txt")),
        ai_tools(
            _call("str_replace", path="seed.txt", old_str="a", new_str="b" * 200, replace_all=True)
        ),
        ai_text("searched"),
    ]
    use_config(
        write_config(
            tmp_path,
            script,
            tools=TOOLS,
            sandbox={"search_timeout_seconds": 3, "max_read_bytes": 1_000_000},
        )
    )
    client = asgi_client(lg_server)
    thread = (await client.threads.create())["thread_id"]
    run = asyncio.create_task(client.runs.wait(thread, "lead_agent", input=USER_INPUT))
    for _ in range(400):  # wait until a search process is busy with the regex
        if await asyncio.to_thread(host_processes, "_fileops.py", running=True):
            break
        await asyncio.sleep(0.025)
    else:
        run.cancel()
        pytest.fail("the search never started")
    ok = await client.http.client.get("/ok")
    assert ok.status_code == 200
    assert not run.done(), "/ok answered while the regular expression was still running"
    await run
    grep_result, bomb = [m for m in await _tool_results(client, thread)][1::3]
    assert grep_result["status"] == "error"
    assert "3-second limit" in str(grep_result["content"])
    assert bomb["status"] == "error"
    assert "more than the 1000000-byte limit" in str(bomb["content"])
    seed = tmp_path / "data/users"
    sizes = [
        p.stat().st_size for p in await asyncio.to_thread(lambda: list(seed.rglob("seed.txt")))
    ]
    assert sizes == [20000], "the refused edit wrote nothing"
