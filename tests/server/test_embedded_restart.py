"""The default (no Postgres) mode keeps what it lists across a dev server restart
(issue 22 item 6): no ghost threads with previews but no state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ai_text, write_config

pytestmark = pytest.mark.blackbox


async def test_a_listed_thread_keeps_its_state_across_a_restart(
    tmp_path: Path, dev_server: Any
) -> None:
    config = await asyncio.to_thread(write_config, tmp_path, [ai_text("one"), ai_text("two")])
    # File persistence as under `make dev` (the test servers' default is off).
    env = {"DEERFLOW_CONFIG": str(config), "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "false"}

    first = dev_server(env=env)
    client: Any = first.client()
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "first"}]}
    )
    first.stop()
    snapshot = first.workdir / ".langgraph_api" / "deerflow_checkpoints.pckl"
    assert await asyncio.to_thread(snapshot.is_file)

    second = dev_server(env=env)
    client = second.client()
    listed = {t["thread_id"] for t in await client.threads.search()}
    assert thread_id in listed
    state = await client.threads.get_state(thread_id)
    assert [m["content"] for m in state["values"]["messages"]] == ["first", "one"]
    result = await client.runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "second"}]}
    )
    assert [m["content"] for m in result["messages"]] == ["first", "one", "second", "two"]
