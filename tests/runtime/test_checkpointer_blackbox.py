"""Acceptance: ``langgraph dev`` subprocesses on the real local Postgres.

Each test gets its own database, so cutting or blocking connections to it (how
a Postgres restart or outage looks to the server's pool) disturbs nothing else
on the shared cluster:

- *restart while idle*: every backend connected to the test database is
  terminated with ``pg_terminate_backend`` (the pool's connections die exactly
  as they do when the server restarts);
- *stopped*: ``ALTER DATABASE ... ALLOW_CONNECTIONS false`` plus terminating
  the backends, so every new connection is refused; then allowed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.support.postgres import admin_uri, fresh_database
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.support.server import DevServer

pytestmark = [pytest.mark.blackbox, pytest.mark.postgres]

FALLBACK_WARNINGS = (
    "Custom checkpointer missing",
    "is not implemented by your custom checkpointer",
    "Failed to clean up custom checkpointer data",
    "using generic fallback",
)


@pytest.fixture
def database(postgres_uri: str) -> Iterator[str]:
    """A database of this test's own (``postgres_uri`` proves Postgres is there)."""
    with fresh_database("deerflow_blackbox") as uri:
        yield uri


def server_env(config: Path, uri: str) -> dict[str, str]:
    return {
        "DEERFLOW_CONFIG": str(config),
        "DEERFLOW_POSTGRES_URI": uri,
        # Thread metadata of `langgraph dev` lives in its pickles; keep them so a
        # restarted server still knows the thread (production keeps it in Postgres).
        "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "false",
    }


def assert_no_fallback(log: str) -> None:
    assert "Using custom checkpointer: DeerflowPostgresSaver" in log
    for warning in FALLBACK_WARNINGS:
        assert warning not in log, warning


def admin(statement: sql.Composed | str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(admin_uri(), autocommit=True) as conn:
        cursor = conn.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []


def query(uri: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(uri, autocommit=True) as conn:
        return conn.execute(statement, params or None).fetchall()


def cut_connections(dbname: str) -> int:
    rows = admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid()",
        dbname,
    )
    return len(rows)


@contextlib.contextmanager
def database_stopped(dbname: str) -> Iterator[None]:
    admin(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname)))
    cut_connections(dbname)
    try:
        yield
    finally:
        admin(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(dbname)))


async def run(server: DevServer, thread_id: str, text: str, **kwargs: Any) -> tuple[str, Any]:
    """Start a run, wait for it, and return its status and output."""
    client: Any = server.client()
    created = await client.runs.create(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": text}]},
        **kwargs,
    )
    output = await client.runs.join(thread_id, created["run_id"])
    status = (await client.runs.get(thread_id, created["run_id"]))["status"]
    return status, output


def contents(state: dict[str, Any]) -> list[str]:
    return [m["content"] for m in state["values"]["messages"]]


async def test_threads_survive_a_restart_and_rollback_copy_delete_take_the_fast_path(
    tmp_path: Path, database: str, dev_server: Callable[..., DevServer]
) -> None:
    config = write_config(
        tmp_path,
        [
            ai_text("one"),
            ai_text("two"),
            ai_tools(tool_call("nap", seconds=30)),  # cancelled by the rollback, never slept out
            ai_text("three"),
        ],
        tools=[{"name": "nap", "group": "test", "use": "tests.support.persistence:nap"}],
    )
    env = server_env(config, database)

    first = dev_server(env=env)
    first_client: Any = first.client()
    thread_id = (await first_client.threads.create())["thread_id"]
    status, output = await run(first, thread_id, "first")
    assert status == "success"
    assert [m["content"] for m in output["messages"]] == ["first", "one"]
    rows = query(database, "SELECT count(*) FROM checkpoints WHERE thread_id = %s", thread_id)
    assert rows[0][0] >= 3
    first.stop()

    # A new process: the whole history is back, and the conversation goes on.
    second = dev_server(env=env)
    client: Any = second.client()
    state = await client.threads.get_state(thread_id)
    assert contents(state) == ["first", "one"]
    history = await client.threads.get_history(thread_id, limit=50)
    assert len(history) == rows[0][0]
    status, output = await run(second, thread_id, "second")
    assert status == "success"
    assert [m["content"] for m in output["messages"]] == ["first", "one", "second", "two"]

    # Rollback: a second run cancels the first (mid-tool) and deletes its checkpoints.
    slow = await client.runs.create(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "slow"}]}
    )
    deadline = time.monotonic() + 20
    while (await client.runs.get(thread_id, slow["run_id"]))["status"] != "running":
        assert time.monotonic() < deadline, "the slow run never started"
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # inside the nap (30 s: load cannot make it end first)
    status, output = await run(second, thread_id, "fast", multitask_strategy="rollback")
    assert status == "success"
    assert [m["content"] for m in output["messages"]][:5] == [
        "first",
        "one",
        "second",
        "two",
        "fast",
    ]
    assert "slow" not in contents(await client.threads.get_state(thread_id))
    leftover = query(
        database,
        "SELECT count(*) FROM checkpoints WHERE metadata ->> 'run_id' = %s",
        slow["run_id"],
    )
    assert leftover[0][0] == 0

    # Copy, then delete the copy: both through the saver's own fast paths.
    copy = await client.threads.copy(thread_id)
    assert contents(await client.threads.get_state(copy["thread_id"])) == contents(
        await client.threads.get_state(thread_id)
    )
    await client.threads.delete(copy["thread_id"])
    remaining = query(
        database,
        "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %s), "
        "(SELECT count(*) FROM checkpoint_messages WHERE thread_id = %s)",
        copy["thread_id"],
        copy["thread_id"],
    )
    assert remaining == [(0, 0)]

    second.stop()
    log = second.log()
    assert_no_fallback(log)
    assert_no_fallback(first.log())
    assert "checkpointer adelete_for_runs: deleted" in log and slow["run_id"] in log
    assert "checkpointer acopy_thread: copied" in log
    assert f"checkpointer adelete_thread: deleted thread {copy['thread_id']}" in log
    assert "postgres pool closed" in log


async def test_runs_ride_out_a_postgres_restart_and_fail_clearly_while_it_is_down(
    tmp_path: Path, database: str, dev_server: Callable[..., DevServer]
) -> None:
    config = write_config(
        tmp_path,
        [ai_text("one"), ai_text("two"), ai_text("three"), ai_text("four")],
        # Short enough for a quick "down" phase, long enough for a loaded machine.
        database={"pool": {"timeout": 10, "reconnect_timeout": 5}},
    )
    server = dev_server(env=server_env(config, database))
    client: Any = server.client()
    dbname = str(conninfo_to_dict(database)["dbname"])
    thread_id = (await client.threads.create())["thread_id"]
    assert (await run(server, thread_id, "a"))[0] == "success"

    # Restarted while idle: the pool's connections are dead; the next run works.
    assert cut_connections(dbname) >= 1
    assert (await run(server, thread_id, "b"))[0] == "success"

    # Stopped: the run fails with a clear error and the server stays up.
    with database_stopped(dbname):
        status, output = await run(server, thread_id, "lost")
        assert status == "error"
        assert output["__error__"]["error"] == "PostgresUnavailableError"
        assert "checkpoint database unavailable at postgres@" in output["__error__"]["message"]
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as http:
            assert (await http.get("/ok")).status_code == 200

    # Back: the next run succeeds and nothing committed before is lost.
    status, output = await run(server, thread_id, "c")
    assert status == "success"
    assert [m["content"] for m in output["messages"]] == ["a", "one", "b", "two", "c", "three"]
    server.stop()
    assert_no_fallback(server.log())
