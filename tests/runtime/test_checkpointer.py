"""``make_checkpointer`` (``checkpointer.path`` in ``langgraph.json``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from runtime.checkpointer import make_checkpointer
from runtime.config import reset_settings_cache
from runtime.embedded_saver import DeerflowEmbeddedSaver
from runtime.memory_saver import DeerflowMemorySaver
from runtime.saver import DeerflowPostgresSaver
from runtime.store import make_store
from tests.support.persistence import agent, thread_turns
from tests.support.scripted import ai_text, write_config
from tests.support.server import PROJECT_ROOT


def test_langgraph_json_registers_both_factories() -> None:
    config = json.loads((PROJECT_ROOT / "langgraph.json").read_text())
    assert config["checkpointer"] == {"path": "./runtime/checkpointer.py:make_checkpointer"}
    # A module path, not a file path: `langgraph dockerfile` rewrites file paths
    # for the image but not store.path, and the module resolves anywhere the
    # project is importable (dev, tests, the image's `pip install -e .`).
    assert config["store"] == {"path": "runtime.store.make_store"}


async def test_without_a_uri_the_default_is_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEERFLOW_POSTGRES_URI", raising=False)
    monkeypatch.setenv("DATABASE_URI", "postgresql://owned-by-the-server/never-used")
    monkeypatch.setenv("LANGGRAPH_DISABLE_FILE_PERSISTENCE", "true")
    reset_settings_cache()
    async with make_checkpointer() as saver:
        assert type(saver) is DeerflowEmbeddedSaver
        assert isinstance(saver, DeerflowMemorySaver) and saver.path is None


@pytest.mark.postgres
async def test_with_a_uri_checkpointer_and_store_share_one_pool(
    postgres_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEERFLOW_POSTGRES_URI", postgres_uri)
    reset_settings_cache()
    async with make_checkpointer() as saver, make_store() as store:
        assert isinstance(saver, DeerflowPostgresSaver)
        assert store.conn is saver.conn  # type: ignore[attr-defined]
        pool = saver.conn
        questions, script = thread_turns(1, question_words=5, tool_words=5)
        config: RunnableConfig = {"configurable": {"thread_id": uuid.uuid4().hex}}
        result = await agent(saver, script).ainvoke(
            {"messages": [HumanMessage(questions[0])]}, config
        )
        assert len(result["messages"]) == 4
        await store.aput(("users", "u1"), "profile", {"name": "Ada"})
        item = await store.aget(("users", "u1"), "profile")
        assert item is not None and item.value == {"name": "Ada"}
    assert pool.closed


@pytest.mark.postgres
async def test_an_optional_schema_is_created_and_used(
    tmp_path: Path, postgres_uri: str, use_config: Callable[[Path], Path]
) -> None:
    schema = f"deerflow_{uuid.uuid4().hex[:8]}"
    use_config(
        write_config(tmp_path, [ai_text("hi")], database={"uri": postgres_uri, "schema": schema})
    )
    async with make_checkpointer() as saver, make_store() as store:
        questions, script = thread_turns(1, question_words=5, tool_words=5)
        config: Any = {"configurable": {"thread_id": "in-schema"}}
        await agent(saver, script).ainvoke({"messages": [HumanMessage(questions[0])]}, config)
        await store.aput(("ns",), "k", {"v": 1})
    with psycopg.connect(postgres_uri) as conn:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        }
        rows = conn.execute(
            f'SELECT count(*) FROM "{schema}".checkpoints WHERE thread_id = %s', ("in-schema",)
        ).fetchone()
    assert {
        "checkpoints",
        "checkpoint_blobs",
        "checkpoint_writes",
        "checkpoint_messages",
        "checkpoint_message_contents",
        "store",
    } <= tables
    assert rows is not None and rows[0] == 5
