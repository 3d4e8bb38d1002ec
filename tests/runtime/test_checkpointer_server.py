"""The in-process LangGraph Server (built from ``langgraph.json``) with the
project's checkpointer: the default is in-memory, and no fallback is used."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ai_text, write_config

pytestmark = pytest.mark.server


async def test_server_runs_copy_and_delete_through_the_in_memory_saver(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    from langgraph_api._checkpointer import get_checkpointer, get_checkpointer_capabilities

    use_config(write_config(tmp_path, [ai_text("hello"), ai_text("again")]))
    client = lg_client()
    thread_id = (await client.threads.create())["thread_id"]
    result = await client.runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert [m["content"] for m in result["messages"]] == ["hi", "hello"]

    checkpointer = await get_checkpointer()
    assert type(checkpointer._inner).__name__ == "DeerflowEmbeddedSaver"
    capabilities = get_checkpointer_capabilities()
    assert capabilities is not None
    assert capabilities.has_adelete_thread and capabilities.has_adelete_for_runs
    assert capabilities.has_acopy_thread and capabilities.has_aprune

    copy = await client.threads.copy(thread_id)
    state = await client.threads.get_state(copy["thread_id"])
    assert [m["content"] for m in state["values"]["messages"]] == ["hi", "hello"]
    await client.threads.delete(copy["thread_id"])
    assert await checkpointer.aget_tuple({"configurable": {"thread_id": copy["thread_id"]}}) is None
