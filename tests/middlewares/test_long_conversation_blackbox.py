"""Acceptance through ``langgraph dev`` on the real Postgres: 300 compacted turns.

The run model is a strict provider with a 2,500-token window: it refuses
(HTTP 400) any request that is not strict or does not fit, so six runs that
each reach their scripted end prove every one of the 300 requests fit and
paired every tool call. Checkpoint storage in Postgres grows by the same amount
per run.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.long_conversation import long_config
from tests.support.postgres import fresh_database
from tests.support.server import DevServer

pytestmark = [pytest.mark.blackbox, pytest.mark.postgres]


@pytest.fixture
def database(postgres_uri: str) -> Iterator[str]:
    with fresh_database("deerflow_long") as uri:
        yield uri


def storage_bytes(uri: str, thread_id: str) -> int:
    with psycopg.connect(uri, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.columns "
                "WHERE column_name = 'thread_id' AND table_schema = current_schema()"
            ).fetchall()
        ]
        total = 0
        for table in tables:
            row = conn.execute(
                f'SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM "{table}" t '
                "WHERE thread_id = %s",
                (thread_id,),
            ).fetchone()
            total += int(row[0]) if row else 0
        return total


async def test_three_hundred_turns_on_postgres_fit_the_window(
    tmp_path: Path, database: str, dev_server: Callable[..., DevServer]
) -> None:
    config = long_config(tmp_path, key="unused", steps=50, windowed=True)
    server = dev_server(env={"DEERFLOW_CONFIG": str(config), "DEERFLOW_POSTGRES_URI": database})
    client: Any = server.client()
    thread_id = (await client.threads.create())["thread_id"]
    sizes = []
    for run in range(6):
        try:
            output = await client.runs.wait(
                thread_id,
                "lead_agent",
                input={"messages": [{"role": "user", "content": f"request {run}"}]},
                config={"recursion_limit": 2000},
            )
        except Exception as exc:
            raise AssertionError(f"run {run} failed: {exc}\n{await server.alog()}") from exc
        assert output["messages"][-1]["content"] == "All steps done.", output["messages"][-1]
        sizes.append(await asyncio.to_thread(storage_bytes, database, thread_id))
    state = await client.threads.get_state(thread_id)
    messages = state["values"]["messages"]
    assert [m for m in messages if m.get("name") == "summary"]
    assert messages[-1]["content"] == "All steps done."
    growth = [later - earlier for earlier, later in itertools.pairwise(sizes)]
    assert max(growth) <= 1.5 * min(growth), growth
