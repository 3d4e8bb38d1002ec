"""``DeerflowPostgresSaver`` across replicas: two (or four) saver instances, each with
its own cache and its own connection pool, on one database.

Each scenario is one the review reproduced against the saver (a rollback or a
delete on one replica, then a write on another from its stale cache; a fork
written while another replica prunes; four replicas writing one thread). Every
checkpoint must read back exactly what was written; where the stock
``AsyncPostgresSaver`` supports the operations, it runs the same sequence on
its own thread as the oracle and both must agree.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from runtime.saver import DeerflowPostgresSaver

pytestmark = pytest.mark.postgres

_versions = itertools.count(1)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def pools(postgres_uri: str) -> AsyncIterator[Callable[[], AsyncConnectionPool[Any]]]:
    """A factory of pools: one per replica, so no two replicas share a connection."""
    opened: list[AsyncConnectionPool[Any]] = []

    def make() -> AsyncConnectionPool[Any]:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            postgres_uri,
            kwargs={"autocommit": True, "prepare_threshold": None, "row_factory": dict_row},
            min_size=1,
            max_size=4,
            open=False,
        )
        opened.append(pool)
        return pool

    setup_pool = make()
    await setup_pool.open(wait=True)
    await DeerflowPostgresSaver(setup_pool).setup()
    yield make
    for pool in opened:
        await pool.close()


async def replica(make: Callable[[], AsyncConnectionPool[Any]]) -> DeerflowPostgresSaver:
    pool = make()
    await pool.open(wait=True)
    return DeerflowPostgresSaver(pool)


async def stock(make: Callable[[], AsyncConnectionPool[Any]]) -> AsyncPostgresSaver:
    pool = make()
    await pool.open(wait=True)
    return AsyncPostgresSaver(pool)  # type: ignore[arg-type]


def human(text: str) -> HumanMessage:
    return HumanMessage(text, id=uuid.uuid4().hex)


def ai(text: str) -> AIMessage:
    return AIMessage(text, id=f"lc_run--{uuid.uuid4().hex}")


async def put(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    parent: str | None,
    messages: list[BaseMessage],
    *,
    run_id: str,
) -> str:
    """Save a checkpoint whose ``messages`` channel is ``messages``; its id."""
    checkpoint = empty_checkpoint()
    version = f"{next(_versions):032d}.0.5"
    checkpoint["channel_values"] = {"messages": list(messages)}
    checkpoint["channel_versions"] = {"messages": version}
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent
    saved = await saver.aput(
        config, checkpoint, {"source": "loop", "step": 0, "run_id": run_id}, {"messages": version}
    )
    return str(saved["configurable"]["checkpoint_id"])


async def read(saver: BaseCheckpointSaver[Any], thread_id: str, checkpoint_id: str | None) -> Any:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    found = await saver.aget_tuple({"configurable": configurable})
    return None if found is None else found.checkpoint["channel_values"].get("messages")


def texts(messages: list[BaseMessage] | None) -> list[tuple[str | None, Any]] | None:
    return None if messages is None else [(m.id, m.content) for m in messages]


# ------------------------------------------------------------- rollback / delete


@pytest.mark.parametrize("how", ["delete_thread", "rollback", "prune_delete"])
async def test_rewriting_a_thread_another_replica_deleted_reads_back(
    pools: Callable[[], AsyncConnectionPool[Any]], how: str
) -> None:
    """B writes a run; A deletes the thread (or rolls the run back); B writes the same
    first message again. Before the fix B reused its cached numbers for rows A had
    deleted: the thread was unreadable from then on, on every replica."""
    a, b = await replica(pools), await replica(pools)
    thread_id = uuid.uuid4().hex
    first, answer = human("first question"), ai("first answer")
    one = await put(b, thread_id, None, [first], run_id="run-1")
    two = await put(b, thread_id, one, [first, answer], run_id="run-1")
    assert texts(await read(a, thread_id, two)) == texts([first, answer])

    if how == "delete_thread":
        await a.adelete_thread(thread_id)
    elif how == "rollback":
        await a.adelete_for_runs(["run-1"])
    else:
        await a.aprune([thread_id], strategy="delete")
    assert await read(a, thread_id, None) is None

    again = await put(b, thread_id, None, [first], run_id="run-2")
    assert texts(await read(b, thread_id, again)) == texts([first])
    assert texts(await read(a, thread_id, again)) == texts([first])
    # Later runs on either replica keep working.
    reply = ai("second answer")
    later = await put(a, thread_id, again, [first, reply], run_id="run-3")
    assert texts(await read(b, thread_id, later)) == texts([first, reply])
    assert texts(await read(a, thread_id, None)) == texts([first, reply])


async def test_resending_a_rolled_back_message_after_another_replicas_turn(
    pools: Callable[[], AsyncConnectionPool[Any]],
) -> None:
    """B writes two runs; A rolls the second back and writes a turn; B re-sends the
    rolled-back message. Before the fix that checkpoint silently read back A's
    message in place of B's (A had reused the freed sequence numbers)."""
    a, b = await replica(pools), await replica(pools)
    thread_id = uuid.uuid4().hex
    q1, a1, q2, a2 = human("q1"), ai("a1"), human("q2 (rolled back)"), ai("a2")
    c1 = await put(b, thread_id, None, [q1, a1], run_id="run-1")
    c2 = await put(b, thread_id, c1, [q1, a1, q2, a2], run_id="run-2")
    assert texts(await read(b, thread_id, c2)) == texts([q1, a1, q2, a2])

    await a.adelete_for_runs(["run-2"])
    q3, a3 = human("q3 from A"), ai("a3 from A")
    c3 = await put(a, thread_id, c1, [q1, a1, q3, a3], run_id="run-3")
    # B re-sends the rolled-back message on top of the thread as it now is.
    c4 = await put(b, thread_id, c3, [q1, a1, q3, a3, q2, a2], run_id="run-4")

    for saver in (a, b):
        assert texts(await read(saver, thread_id, c3)) == texts([q1, a1, q3, a3])
        assert texts(await read(saver, thread_id, c4)) == texts([q1, a1, q3, a3, q2, a2])


async def test_a_replica_that_missed_a_rollback_writes_on_its_old_head(
    pools: Callable[[], AsyncConnectionPool[Any]],
) -> None:
    """The cache's head still matches the put's parent, but another replica rolled
    that head's run back meanwhile: the epoch tells B its cache is stale."""
    a, b = await replica(pools), await replica(pools)
    thread_id = uuid.uuid4().hex
    q1, a1, q2 = human("q1"), ai("a1"), human("q2")
    c1 = await put(b, thread_id, None, [q1], run_id="run-1")
    c2 = await put(b, thread_id, c1, [q1, a1], run_id="run-2")
    await a.adelete_for_runs(["run-2"])
    c3 = await put(b, thread_id, c2, [q1, a1, q2], run_id="run-3")

    assert b.stats["stale"] == 1
    for saver in (a, b):
        assert texts(await read(saver, thread_id, c3)) == texts([q1, a1, q2])


# ------------------------------------------------------------ fork during prune


async def _fork_while_pruning(
    pruner: BaseCheckpointSaver[Any], forker: BaseCheckpointSaver[Any], *, concurrent: bool = True
) -> tuple[Any, Any, Any]:
    """A removes a message and prunes while B forks from an older checkpoint.

    The fork is the thread's newest checkpoint whichever commits first (prune
    keeps the newest, and a fork saved after the prune is the newest). Returns
    what the fork and the latest checkpoint read back, and what was written."""
    thread_id = uuid.uuid4().hex
    q1, a1, q2, a2 = human("q1"), ai("a1"), human("q2"), ai("a2")
    c1 = await put(forker, thread_id, None, [q1, a1], run_id="run-1")
    c2 = await put(forker, thread_id, c1, [q1, a1, q2, a2], run_id="run-2")
    # A drops the first exchange (as summarisation does), then prunes.
    await put(pruner, thread_id, c2, [q2, a2], run_id="run-3")
    fork_messages: list[BaseMessage] = [q1, a1, human("q3 on the fork")]
    if concurrent:
        _, fork = await asyncio.gather(
            pruner.aprune([thread_id], strategy="keep_latest"),
            put(forker, thread_id, c1, fork_messages, run_id="run-4"),
        )
    else:  # the prune commits first; the forker's cache predates it
        await pruner.aprune([thread_id], strategy="keep_latest")
        fork = await put(forker, thread_id, c1, fork_messages, run_id="run-4")
    fork_read = texts(await read(forker, thread_id, fork))
    latest = texts(await read(pruner, thread_id, None))
    return fork_read, latest, texts(fork_messages)


async def test_a_fork_written_while_another_replica_prunes_stays_readable(
    pools: Callable[[], AsyncConnectionPool[Any]],
) -> None:
    """Before the fix the whole fork branch, latest state included, was unreadable
    in about a third of the tries (stock saver: never)."""
    oracle = await _fork_while_pruning(await stock(pools), await stock(pools))
    assert oracle[0] == oracle[1] == oracle[2]
    for attempt in range(16):
        fork_read, latest, written = await _fork_while_pruning(
            await replica(pools), await replica(pools), concurrent=attempt % 4 != 0
        )
        assert fork_read == latest == written


async def test_prune_after_a_removal_agrees_with_the_stock_saver(
    pools: Callable[[], AsyncConnectionPool[Any]],
) -> None:
    """Same operations on both savers (two replicas each): same messages read back."""
    results = []
    q1, a1, q2, a2 = human("q1"), ai("a1"), human("q2"), ai("a2")
    for make_a, make_b in ((replica, replica), (stock, stock)):
        a, b = await make_a(pools), await make_b(pools)
        thread_id = uuid.uuid4().hex
        c1 = await put(b, thread_id, None, [q1, a1, q2, a2], run_id="r1")
        c2 = await put(a, thread_id, c1, [q2, a2], run_id="r2")
        await a.aprune([thread_id], strategy="keep_latest")
        c3 = await put(b, thread_id, c2, [q2, a2, q1], run_id="r3")
        results.append([texts(await read(s, thread_id, c3)) for s in (a, b)])
    assert results[0] == results[1]
    assert results[0][0] is not None and [c for _, c in results[0][0]] == ["q2", "a2", "q1"]


# --------------------------------------------------------- four writers, one thread


async def test_four_replicas_writing_one_thread_never_fail(
    pools: Callable[[], AsyncConnectionPool[Any]],
) -> None:
    """Four replicas each write a chain of checkpoints on one thread at once (with
    messages the others wrote too). Before the fix a few puts failed with
    ``UniqueViolation`` after all retries; now none does and all read back."""
    savers = [await replica(pools) for _ in range(4)]
    thread_id = uuid.uuid4().hex
    shared = [human("shared question"), ai("shared answer")]
    root = await put(savers[0], thread_id, None, shared, run_id="root")
    written: dict[str, list[BaseMessage]] = {}

    async def writer(index: int, saver: DeerflowPostgresSaver) -> None:
        parent, messages = root, list(shared)
        for step in range(10):
            messages = [*messages, human(f"w{index} s{step}"), ai(f"w{index} r{step}")]
            if step % 4 == 3:  # a summarisation-like removal now and then
                messages = [m for m in messages if m.id != messages[0].id]
            parent = await put(saver, thread_id, parent, messages, run_id=f"w{index}")
            written[parent] = list(messages)

    await asyncio.gather(*(writer(i, s) for i, s in enumerate(savers)))
    assert len(written) == 40
    for checkpoint_id, messages in written.items():
        assert texts(await read(savers[0], thread_id, checkpoint_id)) == texts(messages)


async def test_remove_markers_and_writes_survive_a_rollback_elsewhere(
    pools: Callable[[], AsyncConnectionPool[Any]],
) -> None:
    """Pending writes cached by one replica are not trusted after another rolls back."""
    a, b = await replica(pools), await replica(pools)
    thread_id = uuid.uuid4().hex
    q1, a1 = human("q1"), ai("a1")
    c1 = await put(b, thread_id, None, [q1], run_id="run-1")
    c2 = await put(b, thread_id, c1, [q1, a1], run_id="run-2")
    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": c2}
    }
    pending = ai("pending answer")
    await b.aput_writes(config, [("messages", [pending])], "task-1")
    await a.adelete_for_runs(["run-2"])
    c3 = await put(a, thread_id, c1, [q1, ai("other")], run_id="run-3")
    # B writes on top of c3 (as the server would after reading the state).
    marker = RemoveMessage(id=q1.id or "")
    config3: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": c3}
    }
    await b.aput_writes(config3, [("messages", [pending, marker])], "task-2")
    found = await a.aget_tuple(config3)
    assert found is not None
    assert [(w[1], texts(w[2])) for w in found.pending_writes or []] == [
        ("messages", texts([pending, marker]))
    ]


# ------------------------------------------------------- a replica in another process


class ProcessReplica:
    """``tests/support/saver_replica.py`` in its own OS process (its own cache)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def call(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        await self.process.stdin.drain()
        reply = json.loads(await asyncio.wait_for(self.process.stdout.readline(), 60))
        assert "error" not in reply, reply["error"]
        return dict(reply)


@pytest.fixture
async def process_replica(
    postgres_uri: str, pools: Callable[[], AsyncConnectionPool[Any]]
) -> AsyncIterator[ProcessReplica]:
    del pools  # the tables are set up
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.saver_replica",
        postgres_uri,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield ProcessReplica(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            process.kill()
            await process.wait()


def rows_of(messages: list[BaseMessage]) -> list[list[Any]]:
    return [[m.type, m.id, m.content] for m in messages]


@pytest.mark.parametrize("how", ["delete_thread", "rollback"])
async def test_another_process_rewrites_a_thread_this_one_deleted(
    pools: Callable[[], AsyncConnectionPool[Any]], process_replica: ProcessReplica, how: str
) -> None:
    """The issue's first scenario with B in a separate OS process, as reproduced."""
    a = await replica(pools)
    thread_id = uuid.uuid4().hex
    first, answer = human("first question"), ai("first answer")
    one = await process_replica.call(
        op="put", thread=thread_id, parent=None, messages=rows_of([first]), run="run-1"
    )
    await process_replica.call(
        op="put", thread=thread_id, parent=one["id"], messages=rows_of([first, answer]), run="run-1"
    )
    if how == "delete_thread":
        await a.adelete_thread(thread_id)
    else:
        await a.adelete_for_runs(["run-1"])
    again = await process_replica.call(
        op="put", thread=thread_id, parent=None, messages=rows_of([first]), run="run-2"
    )
    assert texts(await read(a, thread_id, again["id"])) == texts([first])
    reply = ai("later answer")
    later = await put(a, thread_id, again["id"], [first, reply], run_id="run-3")
    seen = await process_replica.call(op="read", thread=thread_id, checkpoint=later)
    assert seen["messages"] == rows_of([first, reply])


@pytest.mark.parametrize("view", ["with_a_turn", "own_view"])
async def test_another_process_resends_a_message_this_one_rolled_back(
    pools: Callable[[], AsyncConnectionPool[Any]], process_replica: ProcessReplica, view: str
) -> None:
    """The issue's second scenario with B in a separate OS process: B re-sends the
    rolled-back exchange on top of A's turn, or (its own view) as it had it. Before
    the fix the latter silently read back A's messages in place of B's."""
    a = await replica(pools)
    thread_id = uuid.uuid4().hex
    q1, a1, q2, a2 = human("q1"), ai("a1"), human("q2 (rolled back)"), ai("a2")
    c1 = await process_replica.call(
        op="put", thread=thread_id, parent=None, messages=rows_of([q1, a1]), run="run-1"
    )
    await process_replica.call(
        op="put", thread=thread_id, parent=c1["id"], messages=rows_of([q1, a1, q2, a2]), run="run-2"
    )
    await a.adelete_for_runs(["run-2"])
    q3, a3 = human("q3 from A"), ai("a3 from A")
    c3 = await put(a, thread_id, c1["id"], [q1, a1, q3, a3], run_id="run-3")
    resent = [q1, a1, q3, a3, q2, a2] if view == "with_a_turn" else [q1, a1, q2, a2]
    c4 = await process_replica.call(
        op="put", thread=thread_id, parent=c3, messages=rows_of(resent), run="run-4"
    )
    assert texts(await read(a, thread_id, c4["id"])) == texts(resent)
    assert texts(await read(a, thread_id, c3)) == texts([q1, a1, q3, a3])
