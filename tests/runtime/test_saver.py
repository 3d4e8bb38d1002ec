"""``DeerflowPostgresSaver`` against the real local Postgres.

Real ``create_agent`` graphs with the scripted model write through the saver;
the tests read back what the graph sees and what the tables hold.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from runtime.saver import (
    MESSAGE_REFS_TYPE,
    CheckpointIntegrityError,
    DeerflowPostgresSaver,
    decode_refs,
    encode_refs,
)
from tests.support.persistence import (
    STORAGE_SQL_INTERNED,
    agent,
    message_shape,
    raw_message_bytes,
    thread_turns,
)

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="session")
async def pg_pool(postgres_uri: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        postgres_uri,
        kwargs={"autocommit": True, "prepare_threshold": None, "row_factory": dict_row},
        min_size=1,
        max_size=6,
        open=False,
    )
    await pool.open(wait=True)
    await DeerflowPostgresSaver(pool).setup()
    yield pool
    await pool.close()


@pytest.fixture
async def saver(pg_pool: AsyncConnectionPool[Any]) -> DeerflowPostgresSaver:
    """A fresh saver (its own in-process cache) over the session's set-up tables."""
    return DeerflowPostgresSaver(pg_pool)


def thread_config(thread_id: str | None = None, **metadata: Any) -> RunnableConfig:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id or uuid.uuid4().hex}}
    if metadata:
        config["metadata"] = metadata
    return config


async def rows(pool: AsyncConnectionPool[Any], sql: str, *params: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        return await (await conn.execute(sql, params)).fetchall()


async def count(pool: AsyncConnectionPool[Any], table: str, thread_id: str) -> int:
    result = await rows(pool, f"SELECT count(*) AS n FROM {table} WHERE thread_id = %s", thread_id)
    return int(result[0]["n"])


async def converse(
    checkpointer: BaseCheckpointSaver[Any],
    turns: int,
    config: RunnableConfig,
    *,
    start: int = 0,
    script_turns: int | None = None,
) -> Any:
    questions, script = thread_turns(script_turns or turns, question_words=8, tool_words=20)
    graph = agent(checkpointer, script)
    result = None
    for i in range(start, start + turns):
        result = await graph.ainvoke({"messages": [HumanMessage(questions[i])]}, config)
    return graph, result


# ------------------------------------------------------------------ encoding


def test_refs_are_runs_of_consecutive_seqs() -> None:
    assert encode_refs([1, 2, 3, 4]) == b"[[1,4]]"
    assert encode_refs([1, 2, 5, 6, -1]) == b"[[1,2],[5,2],[-1,1]]"
    assert decode_refs(encode_refs([3, 4, 9, 1, 2])) == [3, 4, 9, 1, 2]


@pytest.mark.parametrize("blob", [b"{}", b"[[1]]", b'[["a",1]]', b"[[1,0]]"])
def test_malformed_refs_are_integrity_errors(blob: bytes) -> None:
    with pytest.raises(CheckpointIntegrityError):
        decode_refs(blob)


# ------------------------------------------------------------ round trips


async def test_agent_history_matches_the_in_memory_saver(saver: DeerflowPostgresSaver) -> None:
    """Every checkpoint of a real agent thread reads back as LangGraph's own saver has it."""
    config = thread_config()
    memory_config = thread_config()
    graph, result = await converse(saver, 3, config)
    memory_graph, memory_result = await converse(InMemorySaver(), 3, memory_config)

    state = await graph.aget_state(config)
    assert state.values["messages"] == result["messages"]  # ids and all
    assert message_shape(result["messages"]) == message_shape(memory_result["messages"])

    history = [s async for s in graph.aget_state_history(config)]
    memory_history = [s async for s in memory_graph.aget_state_history(memory_config)]
    assert len(history) == len(memory_history) == 15
    for ours, theirs in zip(history, memory_history, strict=True):
        assert message_shape(ours.values.get("messages", [])) == message_shape(
            theirs.values.get("messages", [])
        )
        assert ours.next == theirs.next
        assert (ours.metadata or {}).get("step") == (theirs.metadata or {}).get("step")
        assert [t.name for t in ours.tasks] == [t.name for t in theirs.tasks]


async def test_each_message_is_stored_once(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    config = thread_config()
    thread_id = config["configurable"]["thread_id"]
    _, result = await converse(saver, 4, config)
    messages = result["messages"]

    contents = await count(pg_pool, "checkpoint_message_contents", thread_id)
    assert contents == len(messages)
    blobs = await rows(
        pg_pool,
        "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'messages'",
        thread_id,
    )
    assert blobs and all(b["type"] == MESSAGE_REFS_TYPE for b in blobs)
    # Every version of the list is a few runs of sequence numbers, a few bytes
    # long: usually one run; under contention a retried interning may leave a
    # gap in the numbers, which costs a second run, never a second copy.
    versions = sorted(len(decode_refs(b["blob"])) for b in blobs)
    assert versions[-1] == len(messages) and all(v > 0 for v in versions)
    assert all(b["blob"].count(b"[") <= 3 for b in blobs)
    assert max(len(b["blob"]) for b in blobs) < 24


async def test_a_warm_thread_never_asks_the_database_what_exists(
    saver: DeerflowPostgresSaver,
) -> None:
    """Only the thread's first interning looks rows up; no put is retried."""
    await converse(saver, 4, thread_config())
    assert saver.stats["lookups"] == 1
    assert saver.stats["retries"] == 0


async def test_two_processes_on_one_thread_stay_consistent(
    pg_pool: AsyncConnectionPool[Any],
) -> None:
    """A second saver (another replica) writes in between: the first one's cache is
    stale, the clash is detected and retried, and no message is lost or doubled."""
    first, second = DeerflowPostgresSaver(pg_pool), DeerflowPostgresSaver(pg_pool)
    config = thread_config()
    await converse(first, 1, config, script_turns=3)
    await converse(second, 1, config, start=1, script_turns=3)
    graph, result = await converse(first, 1, config, start=2, script_turns=3)

    assert first.stats["retries"] >= 1
    assert len(result["messages"]) == 12
    state = await graph.aget_state(config)
    assert state.values["messages"] == result["messages"]
    assert [m.content for m in state.values["messages"]][::4] == [
        q for q in thread_turns(3, question_words=8, tool_words=20)[0]
    ]


async def test_id_less_messages_round_trip_without_cutting_the_run(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    """Write forms without ids (and RemoveMessage markers) take negative seqs."""
    config = thread_config()
    thread_id = config["configurable"]["thread_id"]
    checkpoint = empty_checkpoint()
    with_id = [HumanMessage("a", id="m-1"), AIMessage("b", id="m-2")]
    checkpoint["channel_values"] = {"messages": with_id}
    checkpoint["channel_versions"] = {"messages": "1"}
    stored = await saver.aput(
        config, checkpoint, {"source": "input", "step": -1}, {"messages": "1"}
    )
    writes = [
        ("messages", [HumanMessage("no id"), RemoveMessage(id="m-1")]),
        ("other", {"plain": True}),
    ]
    await saver.aput_writes(stored, writes, task_id="task-1")

    loaded = await saver.aget_tuple(stored)
    assert loaded is not None
    assert loaded.checkpoint["channel_values"]["messages"] == with_id
    assert [(task, channel) for task, channel, _ in loaded.pending_writes or []] == [
        ("task-1", "messages"),
        ("task-1", "other"),
    ]
    assert loaded.pending_writes is not None
    pending = loaded.pending_writes[0][2]
    assert pending[0] == HumanMessage("no id") and pending[0].id is None
    assert isinstance(pending[1], RemoveMessage) and pending[1].id == "m-1"
    seqs = sorted(
        r["seq"]
        for r in await rows(
            pg_pool, "SELECT seq FROM checkpoint_messages WHERE thread_id = %s", thread_id
        )
    )
    assert seqs == [-2, -1, 1, 2]


async def test_same_content_under_two_ids_shares_one_content_row(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    config = thread_config()
    thread_id = config["configurable"]["thread_id"]
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {
        "messages": [HumanMessage("same", id="a"), HumanMessage("same", id="b")]
    }
    checkpoint["channel_versions"] = {"messages": "1"}
    stored = await saver.aput(config, checkpoint, {}, {"messages": "1"})
    loaded = await saver.aget_tuple(stored)
    assert loaded is not None
    assert [m.id for m in loaded.checkpoint["channel_values"]["messages"]] == ["a", "b"]
    assert await count(pg_pool, "checkpoint_message_contents", thread_id) == 1
    assert await count(pg_pool, "checkpoint_messages", thread_id) == 2


async def test_a_missing_stored_message_is_a_clear_error(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    config = thread_config()
    thread_id = config["configurable"]["thread_id"]
    graph, _ = await converse(saver, 1, config)
    async with pg_pool.connection() as conn:
        await conn.execute(
            "DELETE FROM checkpoint_messages WHERE thread_id = %s AND seq = 1", (thread_id,)
        )
    with pytest.raises(CheckpointIntegrityError, match=r"references 1 stored message"):
        await graph.aget_state(config)


# ------------------------------------------------------- server fast paths


def test_every_recommended_method_is_overridden() -> None:
    """What ``langgraph_api`` probes (``impl is not BaseCheckpointSaver.<name>``)."""
    for name in ("adelete_thread", "adelete_for_runs", "acopy_thread", "aprune"):
        assert getattr(DeerflowPostgresSaver, name) is not getattr(BaseCheckpointSaver, name)


async def test_adelete_thread_removes_every_row_of_that_thread_only(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    doomed, kept = thread_config(), thread_config()
    await converse(saver, 1, doomed)
    graph, result = await converse(saver, 1, kept)
    await saver.adelete_thread(doomed["configurable"]["thread_id"])
    for table in (
        "checkpoints",
        "checkpoint_blobs",
        "checkpoint_writes",
        "checkpoint_messages",
        "checkpoint_message_contents",
    ):
        assert await count(pg_pool, table, doomed["configurable"]["thread_id"]) == 0
        assert await count(pg_pool, table, kept["configurable"]["thread_id"]) > 0
    assert (await graph.aget_state(kept)).values["messages"] == result["messages"]


async def test_adelete_for_runs_rolls_the_thread_back(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    """The rolled-back run's checkpoints, writes, blobs and messages go; the rest stays."""
    thread_id = uuid.uuid4().hex
    questions, script = thread_turns(3, question_words=8, tool_words=20)
    graph = agent(saver, script)
    kept = await graph.ainvoke(
        {"messages": [HumanMessage(questions[0])]}, thread_config(thread_id, run_id="run-1")
    )
    await graph.ainvoke(
        {"messages": [HumanMessage(questions[1])]}, thread_config(thread_id, run_id="run-2")
    )
    await saver.adelete_for_runs(["run-2"])

    state = await graph.aget_state(thread_config(thread_id))
    assert state.values["messages"] == kept["messages"]
    assert await count(pg_pool, "checkpoint_message_contents", thread_id) == len(kept["messages"])
    orphans = await rows(
        pg_pool,
        """SELECT count(*) AS n FROM checkpoint_blobs b WHERE thread_id = %s AND NOT EXISTS (
             SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id
             AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)""",
        thread_id,
    )
    assert orphans[0]["n"] == 0
    # The conversation goes on from the rolled-back point.
    after = await graph.ainvoke(
        {"messages": [HumanMessage(questions[1])]}, thread_config(thread_id, run_id="run-3")
    )
    assert message_shape(after["messages"][:4]) == message_shape(kept["messages"])
    assert len(after["messages"]) == 8


async def test_adelete_for_runs_in_the_middle_splices_the_history(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    thread_id = uuid.uuid4().hex
    questions, script = thread_turns(2, question_words=8, tool_words=20)
    graph = agent(saver, script)
    for i, run in enumerate(("run-a", "run-b")):
        result = await graph.ainvoke(
            {"messages": [HumanMessage(questions[i])]}, thread_config(thread_id, run_id=run)
        )
    await saver.adelete_for_runs(["run-a"])
    # run-b's checkpoints still reference run-a's messages: nothing it needs is gone.
    state = await graph.aget_state(thread_config(thread_id))
    assert state.values["messages"] == result["messages"]
    history = [s async for s in graph.aget_state_history(thread_config(thread_id))]
    assert len(history) == 5
    assert history[-1].parent_config is None
    assert {(s.metadata or {}).get("run_id") for s in history} == {"run-b"}


async def test_adelete_for_runs_with_unknown_runs_is_a_no_op(
    saver: DeerflowPostgresSaver,
) -> None:
    config = thread_config()
    graph, result = await converse(saver, 1, config)
    await saver.adelete_for_runs([])
    await saver.adelete_for_runs(["no-such-run"])
    assert (await graph.aget_state(config)).values["messages"] == result["messages"]


async def test_acopy_thread_copies_rows_exactly(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    source = thread_config(thread_id=uuid.uuid4().hex)
    source_id = source["configurable"]["thread_id"]
    target_id = uuid.uuid4().hex
    graph, result = await converse(saver, 2, source)
    async with pg_pool.connection() as conn:  # what the server's adapter stamps on
        await conn.execute(
            "UPDATE checkpoints SET metadata = metadata || jsonb_build_object('thread_id', "
            "thread_id) WHERE thread_id = %s",
            (source_id,),
        )
    await saver.acopy_thread(source_id, target_id)

    target = thread_config(target_id)
    copied = await graph.aget_state(target)
    assert copied.values["messages"] == result["messages"]
    source_history = [s async for s in graph.aget_state_history(source)]
    target_history = [s async for s in graph.aget_state_history(target)]
    assert [s.config["configurable"]["checkpoint_id"] for s in target_history] == [
        s.config["configurable"]["checkpoint_id"] for s in source_history
    ]
    assert {(s.metadata or {}).get("thread_id") for s in target_history} == {target_id}
    seqs = "SELECT seq, key FROM checkpoint_messages WHERE thread_id = %s ORDER BY seq"
    assert await rows(pg_pool, seqs, target_id) == await rows(pg_pool, seqs, source_id)

    # The copy lives on its own; the source is untouched.
    questions, script = thread_turns(3, question_words=8, tool_words=20)
    await agent(saver, script).ainvoke({"messages": [HumanMessage(questions[2])]}, target)
    assert len((await graph.aget_state(target)).values["messages"]) == 12
    assert (await graph.aget_state(source)).values["messages"] == result["messages"]

    with pytest.raises(ValueError, match="already has checkpoints"):
        await saver.acopy_thread(source_id, target_id)
    with pytest.raises(ValueError, match="same"):
        await saver.acopy_thread(source_id, source_id)


async def test_aprune_keep_latest_keeps_the_state_and_collects_garbage(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    config = thread_config()
    thread_id = config["configurable"]["thread_id"]
    graph, result = await converse(saver, 2, config)
    # Drop the first exchange (as summarisation would): its messages become garbage.
    first = result["messages"][:4]
    await graph.aupdate_state(config, {"messages": [RemoveMessage(id=m.id) for m in first]})
    remaining = (await graph.aget_state(config)).values["messages"]
    assert remaining == result["messages"][4:]

    await saver.aprune([thread_id], strategy="keep_latest")

    assert await count(pg_pool, "checkpoints", thread_id) == 1
    assert (await graph.aget_state(config)).values["messages"] == remaining
    contents = await rows(
        pg_pool,
        "SELECT count(*) AS n FROM checkpoint_message_contents WHERE thread_id = %s",
        thread_id,
    )
    # Only what the kept checkpoint references is left: the first exchange and
    # the RemoveMessage markers went with the pruned checkpoints and their writes.
    assert await count(pg_pool, "checkpoint_writes", thread_id) == 0
    assert contents[0]["n"] == len(remaining)
    assert await count(pg_pool, "checkpoint_messages", thread_id) == len(remaining)
    questions, script = thread_turns(3, question_words=8, tool_words=20)
    after = await agent(saver, script).ainvoke({"messages": [HumanMessage(questions[2])]}, config)
    assert after["messages"][: len(remaining)] == remaining


async def test_aprune_delete_and_bad_arguments(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    config = thread_config()
    thread_id = config["configurable"]["thread_id"]
    await converse(saver, 1, config)
    with pytest.raises(TypeError):
        await saver.aprune(thread_id)
    with pytest.raises(ValueError, match="Unknown prune strategy"):
        await saver.aprune([thread_id], strategy="everything")
    await saver.aprune([thread_id], strategy="delete")
    assert await count(pg_pool, "checkpoints", thread_id) == 0
    assert await count(pg_pool, "checkpoint_message_contents", thread_id) == 0


async def test_concurrent_threads_do_not_queue_behind_one_lock(
    saver: DeerflowPostgresSaver,
) -> None:
    """Several threads run at once through one saver and all read back intact."""
    configs = [thread_config() for _ in range(4)]
    results = await asyncio.gather(*(converse(saver, 2, c) for c in configs))
    for config, (graph, result) in zip(configs, results, strict=True):
        assert (await graph.aget_state(config)).values["messages"] == result["messages"]


# ------------------------------------------------------------- growth bound


async def test_a_200_turn_thread_stays_within_3x_its_raw_messages(
    saver: DeerflowPostgresSaver, pg_pool: AsyncConnectionPool[Any]
) -> None:
    """The issue's bound: total bytes stored for the thread <= 3x the raw messages."""
    config = thread_config()
    thread_id = config["configurable"]["thread_id"]
    questions, script = thread_turns(200)
    graph = agent(saver, script)
    for question in questions:
        result = await graph.ainvoke({"messages": [HumanMessage(question)]}, config)
    messages = result["messages"]
    assert len(messages) == 800
    raw = raw_message_bytes(messages)
    tables = await rows(pg_pool, STORAGE_SQL_INTERNED.replace("%(t)s", "%s"), *([thread_id] * 5))
    total = sum(int(t["b"]) for t in tables)
    assert total <= 3 * raw, {t["t"]: int(t["b"]) for t in tables} | {"raw": raw}
    # The messages themselves are stored exactly once.
    contents = next(t for t in tables if t["t"] == "checkpoint_message_contents")
    assert int(contents["n"]) == 800


async def test_sync_bridges_work_from_another_thread_only(
    saver: DeerflowPostgresSaver,
) -> None:
    source = thread_config()
    graph, result = await converse(saver, 1, source)
    target_id = uuid.uuid4().hex
    await asyncio.to_thread(saver.copy_thread, source["configurable"]["thread_id"], target_id)
    assert (await graph.aget_state(thread_config(target_id))).values["messages"] == result[
        "messages"
    ]
    await asyncio.to_thread(saver.delete_for_runs, ["nothing-to-delete"])
    with pytest.raises(asyncio.InvalidStateError):
        saver.copy_thread(target_id, uuid.uuid4().hex)
