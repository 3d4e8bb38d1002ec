"""``DeerflowPostgresSaver``: the project's Postgres checkpointer.

Two things the stock ``AsyncPostgresSaver`` does not do:

1. **Each message is stored once.** The stock saver writes a channel's whole
   value again at every version, so a ``messages`` list of n messages costs
   O(n) bytes per step and a long thread costs O(n^2). Here any channel value
   (or pending write) that is a list of ``BaseMessage`` is *interned*: each
   message's content goes once into ``checkpoint_message_contents`` (keyed by
   its digest), each (content, message id) pair once into
   ``checkpoint_messages`` under a per-thread sequence number, and the channel
   blob stores only runs of those numbers (``[[first, count], ...]``, usually
   one run). The graph, its reducers and every reader see ordinary message
   lists; only the storage layout differs.

2. **The recommended fast paths of ``langgraph_api``**: ``adelete_thread``,
   ``adelete_for_runs`` (rollback), ``acopy_thread`` and ``aprune`` are
   overridden with set-based SQL, so the server neither warns nor falls back.

Sequence numbers: messages that carry an id (as stored in the channel) take
positive numbers in list order, so a list is one contiguous run; id-less write
forms (a tool result before ``add_messages`` gives it an id) and
``RemoveMessage`` markers take negative numbers, so they never cut a run.

Concurrency (several replicas, and ``langgraph_api``'s one saver per OS
thread): every put that stores message references locks its thread's row in
``checkpoint_message_threads`` (``FOR NO KEY UPDATE``), which hands out
sequence numbers (never reused, even after a rollback) and carries an
*epoch*. Rollback, thread deletion and prune bump the epoch under the same
lock, so they never interleave with a put. A put may reuse what this process
remembers about the thread (an in-process cache of a few hundred threads)
only when the cache's head is the checkpoint's parent and its epoch is the
row's; otherwise it looks the rows up in the database. A message another put
of this process is inserting at that moment is waited for, not inserted
twice; a message another replica inserted first trips the unique constraint
and the put is retried with a lookup. Requires PostgreSQL 14+ (``range_agg``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import weakref
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
from langchain_core.messages import BaseMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.base import SELECT_SQL as _STOCK_SELECT_SQL
from langgraph.checkpoint.postgres.base import _keep_latest as _stock_keep_latest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from runtime.postgres import PostgresUnavailableError, describe_target

__all__ = [
    "MESSAGE_REFS_TYPE",
    "CheckpointIntegrityError",
    "DeerflowPostgresSaver",
]

logger = logging.getLogger(__name__)

MESSAGE_REFS_TYPE = "deerflow-msgrefs"
"""``type`` of a blob or write row whose value is a list of interned messages."""

_PRUNE_DELETE_STRATEGIES = frozenset({"delete", "delete_all"})
_PUT_ATTEMPTS = 4
_CACHE_THREADS = 256

MIGRATIONS: list[str] = [
    "CREATE TABLE IF NOT EXISTS deerflow_checkpoint_migrations (v INTEGER PRIMARY KEY)",
    """CREATE TABLE IF NOT EXISTS checkpoint_message_contents (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    digest BYTEA NOT NULL,
    type TEXT NOT NULL,
    blob BYTEA NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, digest)
)""",
    """CREATE TABLE IF NOT EXISTS checkpoint_messages (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    seq BIGINT NOT NULL,
    key BYTEA NOT NULL,
    content BYTEA NOT NULL,
    message_id TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, seq),
    -- led by the digest, so the primary key is the only index a seq lookup can use
    UNIQUE (key, thread_id, checkpoint_ns),
    FOREIGN KEY (thread_id, checkpoint_ns, content)
        REFERENCES checkpoint_message_contents (thread_id, checkpoint_ns, digest)
)""",
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS checkpoint_messages_content_idx
    ON checkpoint_messages (content, thread_id, checkpoint_ns)""",
    # adelete_for_runs finds a run's checkpoints without knowing its thread.
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS checkpoints_run_id_idx
    ON checkpoints ((metadata ->> 'run_id'))""",
    # One row per thread namespace: the seq counters and the epoch that rollback,
    # delete and prune bump. Kept when a thread is deleted (a replica's cache of
    # the deleted thread must see the new epoch); ``hi``/``lo`` never go back.
    """CREATE TABLE IF NOT EXISTS checkpoint_message_threads (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    epoch BIGINT NOT NULL DEFAULT 0,
    hi BIGINT NOT NULL DEFAULT 0,
    lo BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (thread_id, checkpoint_ns)
)""",
]

# The seqs a blob/write row of MESSAGE_REFS_TYPE references, as int8 ranges.
_REF_RANGES = f"""
    SELECT int8range((r ->> 0)::bigint, (r ->> 0)::bigint + (r ->> 1)::bigint) AS span
    FROM (
        SELECT blob FROM checkpoint_blobs
        WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(ns)s
        AND type = '{MESSAGE_REFS_TYPE}'
        UNION ALL
        SELECT blob FROM checkpoint_writes
        WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(ns)s
        AND type = '{MESSAGE_REFS_TYPE}'
    ) AS refs
    CROSS JOIN LATERAL jsonb_array_elements(convert_from(refs.blob, 'UTF8')::jsonb) AS r
"""

_GC_LOCK_MESSAGES_SQL = f"""
WITH kept AS (SELECT coalesce(range_agg(span), '{{}}'::int8multirange) AS ranges
              FROM ({_REF_RANGES}) AS spans)
SELECT m.seq FROM checkpoint_messages AS m, kept
WHERE m.thread_id = %(thread_id)s AND m.checkpoint_ns = %(ns)s AND NOT (kept.ranges @> m.seq)
FOR UPDATE OF m
"""

# Re-checked in a new snapshot: a writer that held a lock on a candidate has
# committed its reference by now.
_GC_DELETE_MESSAGES_SQL = f"""
WITH kept AS (SELECT coalesce(range_agg(span), '{{}}'::int8multirange) AS ranges
              FROM ({_REF_RANGES}) AS spans)
DELETE FROM checkpoint_messages AS m USING kept
WHERE m.thread_id = %(thread_id)s AND m.checkpoint_ns = %(ns)s
AND m.seq = ANY(%(candidates)s) AND NOT (kept.ranges @> m.seq)
"""

_GC_LOCK_CONTENTS_SQL = """
SELECT c.digest FROM checkpoint_message_contents AS c
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(ns)s AND NOT EXISTS (
    SELECT 1 FROM checkpoint_messages AS m
    WHERE m.thread_id = c.thread_id AND m.checkpoint_ns = c.checkpoint_ns
    AND m.content = c.digest
)
FOR UPDATE OF c
"""

_GC_DELETE_CONTENTS_SQL = """
DELETE FROM checkpoint_message_contents AS c
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(ns)s
AND c.digest = ANY(%(candidates)s) AND NOT EXISTS (
    SELECT 1 FROM checkpoint_messages AS m
    WHERE m.thread_id = c.thread_id AND m.checkpoint_ns = c.checkpoint_ns
    AND m.content = c.digest
)
"""

# Every lookup is a LATERAL probe of a primary key (a range of seqs per run),
# fenced with LIMIT / OFFSET 0 so that stale statistics cannot flatten it into a
# join over all of a thread's rows.
_MESSAGES_COLUMN = f"""(
        select array_agg(array[
            m.seq::text::bytea,
            convert_to(coalesce(m.message_id, ''), 'UTF8'),
            (m.message_id is not null)::text::bytea,
            m.type::bytea,
            m.blob
        ])
        from (
            select bl.blob
            from jsonb_each_text(checkpoint -> 'channel_versions') as v
            cross join lateral (
                select b.blob from checkpoint_blobs b
                where b.thread_id = checkpoints.thread_id
                    and b.checkpoint_ns = checkpoints.checkpoint_ns
                    and b.channel = v.key
                    and b.version = v.value
                    and b.type = '{MESSAGE_REFS_TYPE}'
                limit 1
            ) as bl
            union all
            select cw.blob
            from checkpoint_writes cw
            where cw.thread_id = checkpoints.thread_id
                and cw.checkpoint_ns = checkpoints.checkpoint_ns
                and cw.checkpoint_id = checkpoints.checkpoint_id
                and cw.type = '{MESSAGE_REFS_TYPE}'
        ) as refs
        cross join lateral jsonb_array_elements(convert_from(refs.blob, 'UTF8')::jsonb) as r
        cross join lateral (
            select mm.seq, mm.message_id, cc.type, cc.blob
            from checkpoint_messages mm
            cross join lateral (
                select c.type, c.blob from checkpoint_message_contents c
                where c.thread_id = mm.thread_id
                    and c.checkpoint_ns = mm.checkpoint_ns
                    and c.digest = mm.content
                limit 1
            ) as cc
            where mm.thread_id = checkpoints.thread_id
                and mm.checkpoint_ns = checkpoints.checkpoint_ns
                and mm.seq >= (r ->> 0)::bigint
                and mm.seq < (r ->> 0)::bigint + (r ->> 1)::bigint
            offset 0
        ) as m
    ) as messages"""

_STOCK_TAIL = "as pending_writes\nfrom checkpoints "
if _STOCK_TAIL not in _STOCK_SELECT_SQL:  # pragma: no cover - guards a dependency upgrade
    raise ImportError(
        "langgraph-checkpoint-postgres changed its SELECT_SQL; runtime/saver.py must be updated"
    )
SELECT_SQL = _STOCK_SELECT_SQL.replace(
    _STOCK_TAIL, f"as pending_writes,\n    {_MESSAGES_COLUMN}\nfrom checkpoints "
)

_LOOKUP_MESSAGES_SQL = """
SELECT key, seq, content FROM checkpoint_messages
WHERE thread_id = %s AND checkpoint_ns = %s AND key = ANY(%s)
FOR KEY SHARE
"""
_LOOKUP_CONTENTS_SQL = """
SELECT digest FROM checkpoint_message_contents
WHERE thread_id = %s AND checkpoint_ns = %s AND digest = ANY(%s)
"""
_CLAIM_THREAD_SQL = """
SELECT epoch, hi, lo FROM checkpoint_message_threads
WHERE thread_id = %s AND checkpoint_ns = %s
FOR NO KEY UPDATE
"""
# A thread written before this table existed starts after its highest seq.
_CREATE_THREAD_SQL = """
INSERT INTO checkpoint_message_threads (thread_id, checkpoint_ns, epoch, hi, lo)
SELECT %(thread_id)s, %(ns)s, 0, coalesce(max(seq), 0), coalesce(min(seq), 0)
FROM checkpoint_messages WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(ns)s
ON CONFLICT (thread_id, checkpoint_ns) DO NOTHING
"""
_ADVANCE_THREAD_SQL = """
UPDATE checkpoint_message_threads SET hi = greatest(hi, %s), lo = least(lo, %s)
WHERE thread_id = %s AND checkpoint_ns = %s
"""
# Destructive operations: lock in a fixed order (no deadlock between two of
# them), then bump, so every cache of these threads is stale from now on.
_LOCK_EPOCHS_SQL = """
SELECT thread_id, checkpoint_ns FROM checkpoint_message_threads
WHERE thread_id = ANY(%s) ORDER BY thread_id, checkpoint_ns
FOR NO KEY UPDATE
"""
_BUMP_EPOCHS_SQL = """
UPDATE checkpoint_message_threads SET epoch = epoch + 1 WHERE thread_id = ANY(%s)
"""
_INSERT_CONTENT_SQL = """
INSERT INTO checkpoint_message_contents (thread_id, checkpoint_ns, digest, type, blob)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, digest) DO NOTHING
"""
# No ON CONFLICT: a clash means the cache was stale, and the put is retried.
_INSERT_MESSAGE_SQL = """
INSERT INTO checkpoint_messages (thread_id, checkpoint_ns, seq, key, content, message_id)
VALUES (%s, %s, %s, %s, %s, %s)
"""


class CheckpointIntegrityError(RuntimeError):
    """A checkpoint references stored messages that are missing."""


# --------------------------------------------------------------------------
# Interning helpers (pure; serialisation runs in a worker thread)


@dataclass(frozen=True, slots=True)
class _Interned:
    key: bytes  # digest of (content, message id)
    content: bytes  # digest of the id-less serialisation
    message_id: str | None
    positive: bool  # takes a positive seq (see module docstring)
    typed: tuple[str, bytes]  # what is stored for the content


def _message_list(value: Any) -> list[BaseMessage] | None:
    """``value`` if it is a non-empty plain list of messages, else None."""
    if type(value) is list and value and all(isinstance(m, BaseMessage) for m in value):
        return value
    return None


def _intern_messages(
    serde: Any, digest_serde: Any | None, messages: Sequence[BaseMessage]
) -> list[_Interned]:
    result = []
    for message in messages:
        stripped = message.model_copy(update={"id": None}) if message.id is not None else message
        typed = serde.dumps_typed(stripped)
        basis = typed if digest_serde is None else digest_serde.dumps_typed(stripped)
        content = hashlib.sha256(basis[0].encode() + b"\x00" + basis[1]).digest()
        marker = b"\x00" if message.id is None else b"\x01" + message.id.encode()
        key = hashlib.sha256(content + marker).digest()
        positive = message.id is not None and not isinstance(message, RemoveMessage)
        result.append(_Interned(key, content, message.id, positive, typed))
    return result


def encode_refs(seqs: Sequence[int]) -> bytes:
    """Seqs in list order -> ``[[first, count], ...]`` runs of consecutive numbers."""
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and runs[-1][0] + runs[-1][1] == seq:
            runs[-1][1] += 1
        else:
            runs.append([seq, 1])
    return json.dumps(runs, separators=(",", ":")).encode()


def decode_refs(blob: bytes) -> list[int]:
    runs = json.loads(blob)
    if not isinstance(runs, list):
        raise CheckpointIntegrityError("malformed message reference blob")
    seqs: list[int] = []
    for run in runs:
        if (
            not isinstance(run, list)
            or len(run) != 2
            or not all(isinstance(x, int) for x in run)
            or run[1] < 1
        ):
            raise CheckpointIntegrityError("malformed message reference run")
        seqs.extend(range(run[0], run[0] + run[1]))
    return seqs


# --------------------------------------------------------------------------
# In-process knowledge of what the latest checkpoint of a thread references


@dataclass
class _ThreadCache:
    """What this process knows is stored for a thread namespace, by message key.

    Only rows that the thread's newest checkpoint (``head``) references (its
    message lists, and the writes of it and of checkpoints still being saved)
    are kept here. They stay valid while the thread's epoch is ``epoch``:
    only rollback, delete and prune remove rows, and they bump it.
    """

    head: str | None
    epoch: int
    lists: dict[str, dict[bytes, tuple[int, bytes]]] = field(default_factory=dict)
    writes: dict[str, dict[bytes, tuple[int, bytes]]] = field(default_factory=dict)

    def known(self) -> dict[bytes, tuple[int, bytes]]:
        merged: dict[bytes, tuple[int, bytes]] = {}
        for mapping in (*self.lists.values(), *self.writes.values()):
            merged.update(mapping)
        return merged


@dataclass
class _Plan:
    """What one put must insert, and the seq of every interned message."""

    contents: list[tuple[bytes, str, bytes]] = field(default_factory=list)
    messages: list[tuple[int, bytes, bytes, str | None]] = field(default_factory=list)
    seqs: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)
    next_pos: int = 1
    next_neg: int = -1
    epoch: int | None = None  # the thread's epoch, under its lock (None: no interning)


class _StaleCache(Exception):
    """The thread's epoch moved since this process cached it: redo with a lookup."""


def _assign(
    unique: Mapping[bytes, _Interned],
    known: Mapping[bytes, tuple[int, bytes]],
    next_pos: int,
    next_neg: int,
    contents: set[bytes] | None = None,
) -> _Plan:
    """Give every message a seq: the known one, or the next free positive/negative."""
    plan = _Plan(next_pos=next_pos, next_neg=next_neg)
    have = {c for _, c in known.values()} if contents is None else set(contents)
    for key, item in unique.items():
        if key in known:
            plan.seqs[key] = known[key]
            continue
        if item.positive:
            seq, plan.next_pos = plan.next_pos, plan.next_pos + 1
        else:
            seq, plan.next_neg = plan.next_neg, plan.next_neg - 1
        if item.content not in have:
            have.add(item.content)
            plan.contents.append((item.content, *item.typed))
        plan.messages.append((seq, key, item.content, item.message_id))
        plan.seqs[key] = (seq, item.content)
    return plan


class DeerflowPostgresSaver(AsyncPostgresSaver):
    """``AsyncPostgresSaver`` with interned messages and the server's fast paths."""

    SELECT_SQL = SELECT_SQL
    DEERFLOW_MIGRATIONS = MIGRATIONS

    def __init__(
        self,
        conn: Any,
        pipe: Any = None,
        serde: Any = None,
    ) -> None:
        super().__init__(conn, pipe=pipe, serde=serde)
        # Digests must be deterministic; a custom (e.g. encrypting) serde may not be.
        self._digest_serde = (
            None if type(self.serde) is JsonPlusSerializer else JsonPlusSerializer()
        )
        self._heads: OrderedDict[tuple[str, str], _ThreadCache] = OrderedDict()
        self._thread_locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        # "lookups": puts that had to ask the database which messages exist;
        # "retries": puts redone after a stale cache clashed with the database.
        self.stats: Counter[str] = Counter()
        # Next free positive / negative seq this process hands out, per thread
        # namespace (reserved in call order; never below the database's counters).
        self._counters: OrderedDict[tuple[str, str], list[int]] = OrderedDict()
        # Message keys being inserted by a put in flight, per thread namespace.
        self._inflight: dict[tuple[str, str], dict[bytes, asyncio.Future[None]]] = {}

    # ------------------------------------------------------------------ setup

    @classmethod
    def required_migrations(cls) -> dict[str, int]:
        """Migrations table -> the last version ``setup`` applies (for ``verify``)."""
        return {
            "checkpoint_migrations": len(cls.MIGRATIONS) - 1,
            "deerflow_checkpoint_migrations": len(cls.DEERFLOW_MIGRATIONS) - 1,
        }

    async def setup(self) -> None:
        """The stock tables and migrations, then this saver's own."""
        await super().setup()
        async with self._cursor() as cur:
            await cur.execute(self.DEERFLOW_MIGRATIONS[0])
            row = await (
                await cur.execute(
                    "SELECT v FROM deerflow_checkpoint_migrations ORDER BY v DESC LIMIT 1"
                )
            ).fetchone()
            version = -1 if row is None else int(row["v"])
            for v in range(version + 1, len(self.DEERFLOW_MIGRATIONS)):
                await cur.execute(self.DEERFLOW_MIGRATIONS[v])
                await cur.execute(
                    "INSERT INTO deerflow_checkpoint_migrations (v) VALUES (%s)", (v,)
                )

    # ------------------------------------------------------------- connections

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[DictRow]]:
        """A pooled connection; an unreachable database becomes a clear error."""
        pool = self.conn
        if not isinstance(pool, AsyncConnectionPool):
            async with self.lock:
                yield pool
            return
        try:
            conn = await pool.getconn()
        except PoolTimeout as exc:
            raise PostgresUnavailableError(
                f"checkpoint database unavailable at {describe_target(str(pool.conninfo))}: "
                f"no connection within {pool.timeout:g}s ({exc})"
            ) from exc
        try:
            yield conn
        except psycopg.OperationalError as exc:
            if not (conn.broken or conn.closed):
                raise  # e.g. a serialisation failure: the link itself is fine
            raise PostgresUnavailableError(
                f"lost the connection to the checkpoint database at "
                f"{describe_target(str(pool.conninfo))}: {str(exc).strip() or type(exc).__name__}"
            ) from exc
        finally:
            await pool.putconn(conn)

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        """Like the stock cursor, minus its process-wide lock when using a pool.

        The stock saver serialises every operation through one asyncio lock,
        which only a single shared connection needs; pooled connections are
        independent, so concurrent runs no longer queue behind each other.
        """
        if not isinstance(self.conn, AsyncConnectionPool):
            async with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        async with self._connection() as conn:
            if pipeline:
                async with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
            else:
                async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur

    def _thread_lock(self, thread_id: str, ns: str) -> asyncio.Lock:
        key = (thread_id, ns)
        lock = self._thread_locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._thread_locks[key] = lock
        return lock

    def _cache_put(self, thread_id: str, ns: str, entry: _ThreadCache) -> None:
        self._heads[(thread_id, ns)] = entry
        self._heads.move_to_end((thread_id, ns))
        while len(self._heads) > _CACHE_THREADS:
            self._heads.popitem(last=False)

    def _forget_threads(self, thread_ids: Iterable[str]) -> None:
        doomed = set(thread_ids)
        for key in [k for k in self._heads if k[0] in doomed]:
            self._heads.pop(key, None)

    # ------------------------------------------------------------------ writes

    async def _plan_cached(
        self,
        thread_id: str,
        ns: str,
        unique: Mapping[bytes, _Interned],
        usable: Callable[[_ThreadCache], bool],
    ) -> tuple[_ThreadCache, _Plan, asyncio.Future[None]] | None:
        """Seqs from what this process knows (None: nothing usable, look it up).

        ``usable`` says whether the cache fits this put (its head is the
        checkpoint's parent); its epoch is checked under the thread's lock.
        A message another put of this process is inserting right now is
        waited for, not inserted twice. Seqs for new rows are reserved before
        any await, so concurrent puts never pick the same numbers and a list
        stays one run; a clash with another process trips the unique
        constraints and the put is retried with a lookup.
        """
        key = (thread_id, ns)
        while True:
            cache = self._heads.get(key)
            counters = self._counters.get(key)
            if cache is None or counters is None or not usable(cache):
                return None
            known = cache.known()
            inflight = self._inflight.setdefault(key, {})
            busy = {inflight[k] for k in unique if k not in known and k in inflight}
            if not busy:
                break
            await asyncio.wait(busy)
        plan = _assign(unique, known, counters[0], counters[1])
        counters[:] = [plan.next_pos, plan.next_neg]
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for _, new_key, _, _ in plan.messages:
            inflight[new_key] = done
        self._heads.move_to_end(key)
        return cache, plan, done

    async def _claim(self, cur: AsyncCursor[DictRow], thread_id: str, ns: str) -> DictRow:
        """Lock the thread's counter row (created on first use) until the put commits."""
        await cur.execute(_CLAIM_THREAD_SQL, (thread_id, ns))
        row = await cur.fetchone()
        if row is None:
            await cur.execute(_CREATE_THREAD_SQL, {"thread_id": thread_id, "ns": ns})
            await cur.execute(_CLAIM_THREAD_SQL, (thread_id, ns))
            row = await cur.fetchone()
            assert row is not None
        return row

    async def _lookup(
        self, cur: AsyncCursor[DictRow], thread_id: str, ns: str, unique: Mapping[bytes, _Interned]
    ) -> tuple[dict[bytes, tuple[int, bytes]], set[bytes]]:
        """Which of ``unique`` (and of their contents) the database already holds."""
        self.stats["lookups"] += 1
        known: dict[bytes, tuple[int, bytes]] = {}
        await cur.execute(_LOOKUP_MESSAGES_SQL, (thread_id, ns, list(unique)), prepare=False)
        for row in await cur.fetchall():
            known[bytes(row["key"])] = (int(row["seq"]), bytes(row["content"]))
        contents = {c for _, c in known.values()}
        missing = list({i.content for k, i in unique.items() if k not in known} - contents)
        if missing:
            await cur.execute(_LOOKUP_CONTENTS_SQL, (thread_id, ns, missing), prepare=False)
            contents |= {bytes(r["digest"]) for r in await cur.fetchall()}
        return known, contents

    async def _write(
        self,
        thread_id: str,
        ns: str,
        items: Sequence[_Interned],
        statements: Callable[[AsyncCursor[DictRow], _Plan], Awaitable[None]],
        usable: Callable[[_ThreadCache], bool],
    ) -> _Plan:
        """Insert the interned rows ``items`` need, then ``statements``, in one transaction."""
        unique: dict[bytes, _Interned] = {}
        for item in items:
            unique.setdefault(item.key, item)
        for attempt in range(_PUT_ATTEMPTS):
            reserved = None
            if unique and attempt == 0:
                reserved = await self._plan_cached(thread_id, ns, unique, usable)
                lookup = self._thread_lock(thread_id, ns)
                if reserved is None and lookup.locked():
                    # Another put is looking this thread up; its result will do.
                    async with lookup:
                        pass
                    reserved = await self._plan_cached(thread_id, ns, unique, usable)
            cache, plan, done = reserved if reserved is not None else (None, _Plan(), None)
            lock: Any = (
                self._thread_lock(thread_id, ns)
                if unique and cache is None
                else contextlib.nullcontext()
            )
            try:
                async with (
                    lock,
                    self._connection() as conn,
                    conn.pipeline(),
                    conn.transaction(),
                    conn.cursor(binary=True, row_factory=dict_row) as cur,
                ):
                    if unique:
                        row = await self._claim(cur, thread_id, ns)
                        epoch = int(row["epoch"])
                        if cache is not None and cache.epoch != epoch:
                            raise _StaleCache
                        if cache is None:
                            known, contents = await self._lookup(cur, thread_id, ns, unique)
                            counters = self._counters.get((thread_id, ns), [1, -1])
                            plan = _assign(
                                unique,
                                known,
                                max(int(row["hi"]) + 1, counters[0]),
                                min(int(row["lo"]) - 1, counters[1]),
                                contents,
                            )
                            self._counters[(thread_id, ns)] = [plan.next_pos, plan.next_neg]
                            self._counters.move_to_end((thread_id, ns))
                            while len(self._counters) > _CACHE_THREADS:
                                self._counters.popitem(last=False)
                        plan.epoch = epoch
                        await self._execute_plan(cur, thread_id, ns, plan)
                        seqs = [m[0] for m in plan.messages]
                        if seqs:
                            await cur.execute(
                                _ADVANCE_THREAD_SQL, (max(seqs), min(seqs), thread_id, ns)
                            )
                    await statements(cur, plan)
            except (
                psycopg.errors.UniqueViolation,
                psycopg.errors.ForeignKeyViolation,
                _StaleCache,
            ) as exc:
                self.stats["retries"] += 1
                if isinstance(exc, _StaleCache):
                    self.stats["stale"] += 1
                self._heads.pop((thread_id, ns), None)
                if attempt == _PUT_ATTEMPTS - 1:
                    raise
                continue
            finally:
                if done is not None:
                    self._release(thread_id, ns, done)
            return plan
        raise AssertionError("unreachable")  # pragma: no cover

    def _release(self, thread_id: str, ns: str, done: asyncio.Future[None]) -> None:
        inflight = self._inflight.get((thread_id, ns), {})
        for k in [k for k, f in inflight.items() if f is done]:
            del inflight[k]
        if not inflight:
            self._inflight.pop((thread_id, ns), None)
        if not done.done():
            done.set_result(None)

    async def _execute_plan(
        self, cur: AsyncCursor[DictRow], thread_id: str, ns: str, plan: _Plan
    ) -> None:
        if plan.contents:
            await cur.executemany(
                _INSERT_CONTENT_SQL,
                [(thread_id, ns, digest, t, blob) for digest, t, blob in plan.contents],
            )
        if plan.messages:
            await cur.executemany(
                _INSERT_MESSAGE_SQL,
                [(thread_id, ns, *row) for row in plan.messages],
            )

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint; message-list channels are stored as references."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        parent_id = configurable.get("checkpoint_id")
        stored = checkpoint.copy()
        inline: dict[str, Any] = {}
        blob_values: dict[str, Any] = {}
        for channel, value in checkpoint["channel_values"].items():
            if isinstance(value, _DeltaSnapshot):
                blob_values[channel] = value
                inline[channel] = True
            elif value is None or isinstance(value, str | int | float | bool):
                inline[channel] = value
            else:
                blob_values[channel] = value
        stored["channel_values"] = inline
        versions = {k: v for k, v in new_versions.items() if k in blob_values}
        lists = {k: m for k in versions if (m := _message_list(blob_values[k])) is not None}
        plain = {k: blob_values[k] for k in versions if k not in lists}
        plain_versions = {k: versions[k] for k in plain}

        def serialise() -> tuple[list[Any], dict[str, list[_Interned]]]:
            rows = self._dump_blobs(thread_id, ns, plain, plain_versions)
            interned = {
                k: _intern_messages(self.serde, self._digest_serde, m) for k, m in lists.items()
            }
            return rows, interned

        plain_rows, interned = await asyncio.to_thread(serialise)
        checkpoint_row = (
            thread_id,
            ns,
            checkpoint["id"],
            parent_id,
            Jsonb(stored),
            Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
        )

        async def statements(cur: AsyncCursor[DictRow], plan: _Plan) -> None:
            blob_rows = list(plain_rows)
            for channel, items in interned.items():
                refs = encode_refs([plan.seqs[i.key][0] for i in items])
                blob_rows.append(
                    (thread_id, ns, channel, str(versions[channel]), MESSAGE_REFS_TYPE, refs)
                )
            if blob_rows:
                await cur.executemany(self.UPSERT_CHECKPOINT_BLOBS_SQL, blob_rows)
            await cur.execute(self.UPSERT_CHECKPOINTS_SQL, checkpoint_row)

        items = [item for channel_items in interned.values() for item in channel_items]
        plan = await self._write(
            thread_id,
            ns,
            items,
            statements,
            # The cache describes the parent (or, before the thread's first message
            # checkpoint, only the parent's writes).
            lambda cache: (
                cache.head == parent_id if cache.head is not None else parent_id in cache.writes
            ),
        )
        self._advance_cache(thread_id, ns, parent_id, checkpoint["id"], interned, plan)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _advance_cache(
        self,
        thread_id: str,
        ns: str,
        parent_id: str | None,
        new_id: str,
        interned: Mapping[str, list[_Interned]],
        plan: _Plan,
    ) -> None:
        """The new checkpoint is the newest: remember what it references.

        It shares the parent's unchanged lists; writes saved for it (or for a
        later checkpoint) before it was put stay, older writes are forgotten.
        What was cached under another epoch is dropped.
        """
        current = self._heads.get((thread_id, ns))
        if current is not None and plan.epoch is not None and current.epoch != plan.epoch:
            current = None
        if current is None and plan.epoch is None:
            return
        epoch = plan.epoch if plan.epoch is not None else cast(_ThreadCache, current).epoch
        entry = _ThreadCache(head=new_id, epoch=epoch)
        if current is not None:
            if current.head == parent_id:
                entry.lists = dict(current.lists)
            entry.writes = {cid: w for cid, w in current.writes.items() if cid >= new_id}
        for channel, items in interned.items():
            entry.lists[channel] = {i.key: plan.seqs[i.key] for i in items}
        self._cache_put(thread_id, ns, entry)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes; message lists are stored as references."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        query = (
            self.UPSERT_CHECKPOINT_WRITES_SQL
            if all(w[0] in WRITES_IDX_MAP for w in writes)
            else self.INSERT_CHECKPOINT_WRITES_SQL
        )

        def serialise() -> list[tuple[int, str, tuple[str, bytes] | list[_Interned]]]:
            out: list[tuple[int, str, tuple[str, bytes] | list[_Interned]]] = []
            for idx, (channel, value) in enumerate(writes):
                messages = _message_list(value)
                payload: tuple[str, bytes] | list[_Interned] = (
                    _intern_messages(self.serde, self._digest_serde, messages)
                    if messages is not None
                    else self.serde.dumps_typed(value)
                )
                out.append((WRITES_IDX_MAP.get(channel, idx), channel, payload))
            return out

        prepared = await asyncio.to_thread(serialise)
        items = [i for _, _, p in prepared if isinstance(p, list) for i in p]
        if not items:
            rows = [
                (thread_id, ns, checkpoint_id, task_id, task_path, idx, channel, *payload)
                for idx, channel, payload in prepared
                if isinstance(payload, tuple)
            ]
            async with self._cursor(pipeline=True) as cur:
                await cur.executemany(query, rows)
            return

        async def statements(cur: AsyncCursor[DictRow], plan: _Plan) -> None:
            rows = []
            for idx, channel, payload in prepared:
                typed = (
                    (MESSAGE_REFS_TYPE, encode_refs([plan.seqs[i.key][0] for i in payload]))
                    if isinstance(payload, list)
                    else payload
                )
                rows.append(
                    (thread_id, ns, checkpoint_id, task_id, task_path, idx, channel, *typed)
                )
            await cur.executemany(query, rows)

        plan = await self._write(
            thread_id,
            ns,
            items,
            statements,
            # Writes go to the head or to a checkpoint still being saved after it.
            lambda cache: cache.head is None or checkpoint_id >= cache.head,
        )
        entry = self._heads.get((thread_id, ns))
        if entry is None or entry.epoch != plan.epoch:
            entry = _ThreadCache(head=None, epoch=cast(int, plan.epoch))
        entry.writes.setdefault(checkpoint_id, {}).update({i.key: plan.seqs[i.key] for i in items})
        self._cache_put(thread_id, ns, entry)

    # ------------------------------------------------------------------- reads

    async def _load_checkpoint_tuple(self, value: DictRow) -> CheckpointTuple:
        """Build a tuple from a row of ``SELECT_SQL``, resolving message references."""
        thread_id = value["thread_id"]
        ns = value["checkpoint_ns"]
        checkpoint_id = value["checkpoint_id"]

        def decode() -> tuple[dict[str, Any], list[tuple[str, str, Any]]]:
            stored = {
                int(seq.decode()): (ident.decode() if has_id == b"true" else None, t.decode(), blob)
                for seq, ident, has_id, t, blob in (value.get("messages") or [])
            }

            def resolve(blob: bytes, where: str) -> list[BaseMessage]:
                seqs = decode_refs(blob)
                missing = [s for s in seqs if s not in stored]
                if missing:
                    raise CheckpointIntegrityError(
                        f"thread {thread_id!r} checkpoint {checkpoint_id!r} ({where}) "
                        f"references {len(missing)} stored message(s) that no longer exist"
                    )
                messages = []
                for s in seqs:
                    message_id, t, data = stored[s]
                    message = self.serde.loads_typed((t, data))
                    if message_id is not None:
                        message.id = message_id
                    messages.append(message)
                return messages

            values: dict[str, Any] = {}
            for channel_b, type_b, blob in value["channel_values"] or []:
                channel, type_ = channel_b.decode(), type_b.decode()
                if type_ == "empty":
                    continue
                if type_ == MESSAGE_REFS_TYPE:
                    values[channel] = resolve(blob, f"channel {channel!r}")
                else:
                    values[channel] = self.serde.loads_typed((type_, blob))
            writes = []
            for task_b, channel_b, type_b, blob, _path, _idx in sorted(
                value["pending_writes"] or [],
                key=lambda w: writes_sort_key(w[4].decode(), w[0].decode(), int(w[5])),
            ):
                channel, type_ = channel_b.decode(), type_b.decode()
                if type_ == MESSAGE_REFS_TYPE:
                    decoded: Any = resolve(blob, f"write to {channel!r}")
                else:
                    decoded = self.serde.loads_typed((type_, blob))
                writes.append((task_b.decode(), channel, decoded))
            return values, writes

        blob_values, pending = await asyncio.to_thread(decode)
        checkpoint = value["checkpoint"]
        return CheckpointTuple(
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            cast(
                Checkpoint,
                {
                    **checkpoint,
                    "channel_values": {**(checkpoint.get("channel_values") or {}), **blob_values},
                },
            ),
            value["metadata"],
            (
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": value["parent_checkpoint_id"],
                    }
                }
                if value["parent_checkpoint_id"]
                else None
            ),
            pending,
        )

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The generic walk (through ``aget_tuple``), which resolves references.

        The stock fast path reads write rows directly and cannot decode them.
        """
        return await BaseCheckpointSaver.aget_delta_channel_history(
            self, config=config, channels=channels
        )

    # ------------------------------------------------------- server fast paths

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every row of a thread, in one transaction."""
        thread_id = str(thread_id)
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            await _bump_epochs(cur, [thread_id])
            await _delete_threads(cur, [thread_id])
        self._forget_threads([thread_id])
        logger.info("checkpointer adelete_thread: deleted thread %s", thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) that ``run_ids`` created.

        Used for ``multitask_strategy="rollback"``. Checkpoints of later runs
        that descended from a deleted one are re-parented to its nearest
        surviving ancestor; blobs and messages nothing references any more go.
        """
        ids = [str(r) for r in run_ids]
        if not ids:
            return
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE metadata ->> 'run_id' = ANY(%s)",
                (ids,),
                prepare=False,
            )
            threads = [r["thread_id"] for r in await cur.fetchall()]
            if not threads:
                return
            # From here on no put of these threads interleaves, and every cache
            # of them (in any process) is stale.
            await _bump_epochs(cur, threads)
            await cur.execute(
                """
                DELETE FROM checkpoints WHERE metadata ->> 'run_id' = ANY(%s)
                RETURNING thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
                          checkpoint -> 'channel_versions' AS versions
                """,
                (ids,),
                prepare=False,
            )
            deleted = await cur.fetchall()
            if not deleted:
                return
            by_ns: dict[tuple[str, str], list[DictRow]] = {}
            for row in deleted:
                by_ns.setdefault((row["thread_id"], row["checkpoint_ns"]), []).append(row)
            for (thread_id, ns), rows in by_ns.items():
                gone = [r["checkpoint_id"] for r in rows]
                await cur.execute(
                    "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s "
                    "AND checkpoint_id = ANY(%s)",
                    (thread_id, ns, gone),
                    prepare=False,
                )
                await _reparent(
                    cur,
                    thread_id,
                    ns,
                    {r["checkpoint_id"]: r["parent_checkpoint_id"] for r in rows},
                )
                await _collect_blobs(cur, thread_id, ns, rows)
            for thread_id, ns in by_ns:
                await _collect_messages(cur, thread_id, ns)
        self._forget_threads(t for t, _ in by_ns)
        logger.info(
            "checkpointer adelete_for_runs: deleted %d checkpoint(s) of run(s) %s",
            len(deleted),
            ", ".join(ids),
        )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every row of a thread to a new thread id, in one snapshot."""
        source, target = str(source_thread_id), str(target_thread_id)
        if source == target:
            raise ValueError("acopy_thread: source and target thread are the same")
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            await cur.execute("SELECT 1 FROM checkpoints WHERE thread_id = %s LIMIT 1", (target,))
            if await cur.fetchone() is not None:
                raise ValueError(f"acopy_thread: target thread {target!r} already has checkpoints")
            params = {"source": source, "target": target}
            copied = 0
            for statement in _COPY_SQL:
                await cur.execute(statement, params, prepare=False)
                copied = copied or cur.rowcount
        self._forget_threads([target])
        logger.info(
            "checkpointer acopy_thread: copied %d checkpoint(s) from %s to %s",
            copied,
            source,
            target,
        )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: the stock prune, then drop messages it orphaned.
        ``delete`` (or ``delete_all``): remove the threads entirely."""
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread IDs, not a str")
        ids = [str(t) for t in thread_ids]
        if strategy in _PRUNE_DELETE_STRATEGIES:
            if ids:
                async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
                    await _bump_epochs(cur, ids)
                    await _delete_threads(cur, ids)
                self._forget_threads(ids)
                logger.info("checkpointer aprune(%s): deleted %d thread(s)", strategy, len(ids))
            return
        if strategy != "keep_latest":
            raise ValueError(f"Unknown prune strategy: {strategy!r}")
        if not ids:
            return
        for thread_id in ids:
            await self._keep_latest(thread_id)
        self._forget_threads(ids)
        logger.info("checkpointer aprune(keep_latest): pruned %d thread(s)", len(ids))

    async def _keep_latest(self, thread_id: str) -> None:
        """The stock ``keep_latest`` statements and the message collection, in one
        transaction that holds the thread's lock: a put (a fork from an old
        checkpoint included) comes wholly before or wholly after it."""
        for attempt in range(_PUT_ATTEMPTS):
            try:
                async with (
                    self._connection() as conn,
                    conn.transaction(),
                    conn.cursor(row_factory=dict_row) as cur,
                ):
                    statements = _stock_keep_latest(thread_id)
                    sql, params, fetch = next(statements)  # the isolation level, first
                    await cur.execute(sql, params, prepare=False)
                    await _bump_epochs(cur, [thread_id])
                    try:
                        sql, params, fetch = statements.send([])
                        while True:
                            await cur.execute(sql, params, prepare=False)
                            result = await cur.fetchall() if fetch else []
                            sql, params, fetch = statements.send(result)
                    except StopIteration:
                        pass
                    await cur.execute(
                        "SELECT DISTINCT checkpoint_ns FROM checkpoint_messages "
                        "WHERE thread_id = %s",
                        (thread_id,),
                        prepare=False,
                    )
                    for row in await cur.fetchall():
                        await _collect_messages(cur, thread_id, row["checkpoint_ns"])
            except psycopg.errors.SerializationFailure:
                # A put committed between the snapshot and the lock: prune again.
                if attempt == _PUT_ATTEMPTS - 1:
                    raise
                continue
            return

    def _bridge(self, coroutine: Any) -> Any:
        """Run an async method from another thread, like the stock sync methods."""
        try:
            if asyncio.get_running_loop() is self.loop:
                coroutine.close()
                raise asyncio.InvalidStateError(
                    "Synchronous calls to DeerflowPostgresSaver are only allowed from a "
                    "different thread; use the async method on the event loop."
                )
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._bridge(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._bridge(self.acopy_thread(source_thread_id, target_thread_id))


# --------------------------------------------------------------------------
# SQL helpers for the fast paths

_THREAD_TABLES = (
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoint_messages",
    "checkpoint_message_contents",  # after checkpoint_messages (foreign key)
)

_COPY_SQL = (
    """INSERT INTO checkpoints
       (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)
       SELECT %(target)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
              CASE WHEN metadata ? 'thread_id'
                   THEN jsonb_set(metadata, '{thread_id}', to_jsonb(%(target)s::text))
                   ELSE metadata END
       FROM checkpoints WHERE thread_id = %(source)s""",
    """INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
       SELECT %(target)s, checkpoint_ns, channel, version, type, blob
       FROM checkpoint_blobs WHERE thread_id = %(source)s""",
    """INSERT INTO checkpoint_writes
       (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
       SELECT %(target)s, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
       FROM checkpoint_writes WHERE thread_id = %(source)s""",
    """INSERT INTO checkpoint_message_contents (thread_id, checkpoint_ns, digest, type, blob)
       SELECT %(target)s, checkpoint_ns, digest, type, blob
       FROM checkpoint_message_contents WHERE thread_id = %(source)s""",
    """INSERT INTO checkpoint_messages (thread_id, checkpoint_ns, seq, key, content, message_id)
       SELECT %(target)s, checkpoint_ns, seq, key, content, message_id
       FROM checkpoint_messages WHERE thread_id = %(source)s""",
    # The target's counters start where the source's are; a row left by a deleted
    # thread of that id keeps counting and moves its epoch on.
    """INSERT INTO checkpoint_message_threads AS t (thread_id, checkpoint_ns, epoch, hi, lo)
       SELECT %(target)s, checkpoint_ns, 0, hi, lo
       FROM checkpoint_message_threads WHERE thread_id = %(source)s
       ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE
       SET epoch = t.epoch + 1, hi = greatest(t.hi, excluded.hi), lo = least(t.lo, excluded.lo)""",
)


async def _bump_epochs(cur: AsyncCursor[Any], thread_ids: list[str]) -> None:
    """Lock the threads' counter rows (in a fixed order) and move their epoch on."""
    await cur.execute(_LOCK_EPOCHS_SQL, (thread_ids,), prepare=False)
    await cur.execute(_BUMP_EPOCHS_SQL, (thread_ids,), prepare=False)


async def _delete_threads(cur: AsyncCursor[Any], thread_ids: list[str]) -> None:
    for table in _THREAD_TABLES:
        await cur.execute(
            f"DELETE FROM {table} WHERE thread_id = ANY(%s)", (thread_ids,), prepare=False
        )


async def _reparent(
    cur: AsyncCursor[DictRow], thread_id: str, ns: str, parent_of: Mapping[str, str | None]
) -> None:
    """Children of deleted checkpoints point at their nearest surviving ancestor."""
    await cur.execute(
        "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints "
        "WHERE thread_id = %s AND checkpoint_ns = %s AND parent_checkpoint_id = ANY(%s)",
        (thread_id, ns, list(parent_of)),
        prepare=False,
    )
    for row in await cur.fetchall():
        ancestor = row["parent_checkpoint_id"]
        seen: set[str] = set()
        while ancestor in parent_of and ancestor not in seen:
            seen.add(ancestor)
            ancestor = parent_of[ancestor]
        await cur.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = %s "
            "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
            (ancestor, thread_id, ns, row["checkpoint_id"]),
        )


async def _collect_blobs(
    cur: AsyncCursor[DictRow], thread_id: str, ns: str, deleted: Sequence[DictRow]
) -> None:
    """Delete blob versions the deleted checkpoints used and no remaining one does."""
    freed: dict[str, set[str]] = {}
    for row in deleted:
        for channel, version in (row["versions"] or {}).items():
            freed.setdefault(channel, set()).add(str(version))
    if not freed:
        return
    await cur.execute(
        """SELECT DISTINCT v.key AS channel, v.value AS version FROM checkpoints c
           CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
           WHERE c.thread_id = %s AND c.checkpoint_ns = %s""",
        (thread_id, ns),
        prepare=False,
    )
    for row in await cur.fetchall():
        freed.get(row["channel"], set()).discard(row["version"])
    for channel, versions in freed.items():
        if versions:
            await cur.execute(
                "DELETE FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = %s "
                "AND channel = %s AND version = ANY(%s)",
                (thread_id, ns, channel, sorted(versions)),
                prepare=False,
            )


async def _collect_messages(cur: AsyncCursor[DictRow], thread_id: str, ns: str) -> None:
    """Delete interned messages (then contents) that no blob or write references.

    Lock candidates, then re-check references in a new statement: a writer
    that locked a candidate first has committed its reference by then, and one
    that comes later finds the row gone and inserts it again.
    """
    params: dict[str, Any] = {"thread_id": thread_id, "ns": ns}
    await cur.execute(_GC_LOCK_MESSAGES_SQL, params, prepare=False)
    candidates = [int(r["seq"]) for r in await cur.fetchall()]
    if candidates:
        await cur.execute(
            _GC_DELETE_MESSAGES_SQL, {**params, "candidates": candidates}, prepare=False
        )
    await cur.execute(_GC_LOCK_CONTENTS_SQL, params, prepare=False)
    digests = [bytes(r["digest"]) for r in await cur.fetchall()]
    if digests:
        await cur.execute(_GC_DELETE_CONTENTS_SQL, {**params, "candidates": digests}, prepare=False)
