"""``DeerflowMemorySaver``: the development default has the same fast paths."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from runtime.memory_saver import DeerflowMemorySaver
from tests.support.persistence import agent, message_shape, thread_turns

QUESTIONS, SCRIPT = thread_turns(3, question_words=8, tool_words=20)


def config(thread_id: str, **metadata: Any) -> RunnableConfig:
    result: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if metadata:
        result["metadata"] = metadata
    return result


async def ask(saver: DeerflowMemorySaver, thread_id: str, turn: int, **metadata: Any) -> Any:
    graph = agent(saver, SCRIPT)
    result = await graph.ainvoke(
        {"messages": [HumanMessage(QUESTIONS[turn])]}, config(thread_id, **metadata)
    )
    return graph, result


def test_every_recommended_method_is_overridden() -> None:
    for name in ("adelete_thread", "adelete_for_runs", "acopy_thread", "aprune"):
        assert getattr(DeerflowMemorySaver, name) is not getattr(BaseCheckpointSaver, name)


async def test_delete_for_runs_rolls_back_and_collects_blobs() -> None:
    saver = DeerflowMemorySaver()
    thread = uuid.uuid4().hex
    _, kept = await ask(saver, thread, 0, run_id="r1")
    graph, _ = await ask(saver, thread, 1, run_id="r2")
    await saver.adelete_for_runs(["r2"])
    assert (await graph.aget_state(config(thread))).values["messages"] == kept["messages"]
    history = [s async for s in graph.aget_state_history(config(thread))]
    assert len(history) == 5
    used = set()
    for snapshot in history:
        stored = await saver.aget_tuple(snapshot.config)
        assert stored is not None
        used |= {
            (thread, "", channel, str(version))
            for channel, version in stored.checkpoint["channel_versions"].items()
        }
    assert set(saver.blobs) <= used
    assert not [
        k
        for k in saver.writes
        if k[0] == thread
        and k[2] not in {s.config["configurable"]["checkpoint_id"] for s in history}
    ]


async def test_delete_for_runs_in_the_middle_splices_parents() -> None:
    saver = DeerflowMemorySaver()
    thread = uuid.uuid4().hex
    await ask(saver, thread, 0, run_id="a")
    graph, result = await ask(saver, thread, 1, run_id="b")
    await saver.adelete_for_runs(["a"])
    history = [s async for s in graph.aget_state_history(config(thread))]
    assert len(history) == 5 and history[-1].parent_config is None
    assert (await graph.aget_state(config(thread))).values["messages"] == result["messages"]


async def test_copy_thread_is_independent_of_its_source() -> None:
    saver = DeerflowMemorySaver()
    source, target = uuid.uuid4().hex, uuid.uuid4().hex
    graph, result = await ask(saver, source, 0)
    checkpoints = saver.storage[source][""]
    for cid, (checkpoint, stored, parent) in list(checkpoints.items()):
        # What the server's adapter stamps on every checkpoint.
        stamped = {**saver.serde.loads_typed(stored), "thread_id": source}
        checkpoints[cid] = (checkpoint, saver.serde.dumps_typed(stamped), parent)
    await saver.acopy_thread(source, target)
    copied = (await graph.aget_state(config(target))).values["messages"]
    assert copied == result["messages"]
    stamps = [dict(s.metadata or {}) async for s in graph.aget_state_history(config(target))]
    assert {m.get("thread_id") for m in stamps} == {target}

    await ask(saver, target, 1)
    assert len((await graph.aget_state(config(target))).values["messages"]) == 8
    assert (await graph.aget_state(config(source))).values["messages"] == result["messages"]
    with pytest.raises(ValueError, match="already has checkpoints"):
        await saver.acopy_thread(source, target)


async def test_prune_keep_latest_and_delete() -> None:
    saver = DeerflowMemorySaver()
    thread = uuid.uuid4().hex
    await ask(saver, thread, 0)
    graph, result = await ask(saver, thread, 1)
    await saver.aprune([thread], strategy="keep_latest")
    history = [s async for s in graph.aget_state_history(config(thread))]
    assert len(history) == 1 and history[0].parent_config is None
    assert message_shape(history[0].values["messages"]) == message_shape(result["messages"])
    _, after = await ask(saver, thread, 2)
    assert len(after["messages"]) == 12

    await saver.aprune([thread], strategy="delete")
    assert await saver.aget_tuple(config(thread)) is None
    assert not [k for k in saver.blobs if k[0] == thread]
    with pytest.raises(ValueError, match="Unknown prune strategy"):
        await saver.aprune([thread], strategy="sometimes")
    with pytest.raises(TypeError):
        await saver.aprune(thread)
