"""Memory across a ``langgraph dev`` restart on the real Postgres store.

The first server stops gracefully with an extraction still pending (a long
debounce): its shutdown drains the queue into Postgres. The second server,
a new process on the same database, lists the memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.test_memory_server import EXTRACT, FACT
from tests.support.postgres import fresh_database
from tests.support.scripted import ai_text, scripted_model_entry, write_config
from tests.support.server import DevServer

pytestmark = [pytest.mark.blackbox, pytest.mark.postgres]


@pytest.fixture
def database(postgres_uri: str) -> Iterator[str]:
    with fresh_database("deerflow_memory") as uri:
        yield uri


async def test_a_pending_extraction_is_drained_at_shutdown_and_survives_a_restart(
    tmp_path: Path, database: str, dev_server: Callable[..., DevServer]
) -> None:
    config = write_config(
        tmp_path,
        models=[
            scripted_model_entry([ai_text("noted")], name="lead"),
            scripted_model_entry(EXTRACT, name="extractor"),
        ],
        data_root=str(tmp_path / "data"),
        memory={"enabled": True, "model": "extractor", "debounce_seconds": 3600},
    )
    env = {"DEERFLOW_CONFIG": str(config), "DEERFLOW_POSTGRES_URI": database}

    first = dev_server(env=env)
    client: Any = first.client()
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "My favourite colour is teal."}]},
    )
    async with httpx.AsyncClient(base_url=first.url, timeout=30) as http:
        assert (await http.get("/memory")).json() == {"memories": []}  # still pending
    first.stop()

    second = dev_server(env=env)
    async with httpx.AsyncClient(base_url=second.url, timeout=30) as http:
        (memory,) = (await http.get("/memory")).json()["memories"]
    assert memory["content"] == FACT and memory["source_thread"] == thread["thread_id"]
