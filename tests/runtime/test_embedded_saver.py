"""``DeerflowEmbeddedSaver``: the default mode keeps threads across restarts, in O(n)."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from runtime.embedded_saver import DeerflowEmbeddedSaver
from runtime.memory_saver import DeerflowMemorySaver
from tests.support.persistence import agent, message_shape, raw_message_bytes, thread_turns


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


async def converse(saver: Any, thread_id: str, turns: int) -> list[Any]:
    questions, script = thread_turns(turns, question_words=20, tool_words=120)
    graph = agent(saver, script)
    result: dict[str, Any] = {}
    for question in questions:
        result = await graph.ainvoke({"messages": [HumanMessage(question)]}, config(thread_id))
    return list(result["messages"])


def stored_bytes(saver: DeerflowMemorySaver) -> int:
    """What the saver holds: blobs, writes, checkpoints and (embedded) the message table."""
    total = sum(len(t[1]) for t in saver.blobs.values())
    total += sum(len(w[2][1]) for ws in saver.writes.values() for w in ws.values())
    total += sum(
        len(cp[0][1]) + len(cp[1][1])
        for namespaces in saver.storage.values()
        for checkpoints in namespaces.values()
        for cp in checkpoints.values()
    )
    if isinstance(saver, DeerflowEmbeddedSaver):
        total += sum(len(t[1]) for t in saver.interner.messages.values())
    return total


async def test_storage_grows_linearly_where_the_memory_saver_grows_quadratically() -> None:
    sizes: dict[str, list[float]] = {"embedded": [], "memory": []}
    for turns in (6, 12):
        for name, saver in (
            ("embedded", DeerflowEmbeddedSaver()),
            ("memory", DeerflowMemorySaver()),
        ):
            messages = await converse(saver, "t", turns)
            sizes[name].append(stored_bytes(saver) / raw_message_bytes(messages))
    # Bytes stored per byte of conversation: flat when storage is O(n), growing with n
    # when every version re-stores the whole list.
    embedded_small, embedded_large = sizes["embedded"]
    memory_small, memory_large = sizes["memory"]
    assert embedded_large < embedded_small * 1.25, sizes
    assert memory_large > memory_small * 1.6, sizes
    assert embedded_large * 3 < memory_large, sizes


async def test_a_thread_survives_a_restart_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / ".langgraph_api" / "deerflow_checkpoints.pckl"
    questions, script = thread_turns(2, question_words=5, tool_words=10)
    async with DeerflowEmbeddedSaver(path=path).persisted(interval=60) as first:
        graph = agent(first, script)
        await graph.ainvoke({"messages": [HumanMessage(questions[0])]}, config("t1"))
        before = await graph.aget_state(config("t1"))
        history = [s async for s in graph.aget_state_history(config("t1"))]
    assert await asyncio.to_thread(path.is_file)

    async with DeerflowEmbeddedSaver(path=path).persisted(interval=60) as second:
        graph = agent(second, script)
        after = await graph.aget_state(config("t1"))
        assert message_shape(after.values["messages"]) == message_shape(before.values["messages"])
        assert len([s async for s in graph.aget_state_history(config("t1"))]) == len(history)
        result = await graph.ainvoke({"messages": [HumanMessage(questions[1])]}, config("t1"))
    # The conversation went on where it was: turn 2 answered, not turn 1 again.
    contents = [str(m.content) for m in result["messages"]]
    assert contents[-1].startswith("Answer 1:") and len(result["messages"]) == 8


async def test_deleted_threads_leave_no_messages_in_the_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pckl"
    saver = DeerflowEmbeddedSaver(path=path)
    await converse(saver, "keep", 2)
    await converse(saver, "gone", 2)
    await saver.acopy_thread("keep", "copy")
    await saver.adelete_thread("gone")
    await asyncio.to_thread(saver.save)
    data = await asyncio.to_thread(lambda: pickle.loads(path.read_bytes()))
    referenced = saver.interner.referenced(list(data["blobs"].values()))
    assert set(data["interned"]["messages"]) == referenced
    assert {thread for thread in data["storage"]} == {"keep", "copy"}


async def test_an_unreadable_snapshot_is_set_aside_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pckl"
    await asyncio.to_thread(path.write_bytes, b"not a pickle")
    async with DeerflowEmbeddedSaver(path=path).persisted() as saver:
        assert await saver.aget_tuple(config("t")) is None
    assert await asyncio.to_thread(path.with_suffix(".pckl.unreadable").is_file)
