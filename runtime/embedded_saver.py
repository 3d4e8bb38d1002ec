"""``DeerflowEmbeddedSaver``: the default (no Postgres) checkpointer, kept across restarts.

Without Postgres, ``langgraph dev`` keeps its thread list in ``.langgraph_api/``
across restarts, but a purely in-memory checkpointer forgot every thread's
state: a listed conversation came back empty and the next run started over.
This saver is ``DeerflowMemorySaver`` (same fast paths) plus two things:

1. **Each message is stored once.** The in-memory saver serialises a channel's
   whole value at every version, so a thread of n messages costs O(n^2) bytes.
   Here a channel value (or pending write) that is a list of messages is stored
   as references into one table of serialised messages (content-addressed, so a
   message shared by many versions, or by a copied thread, is kept once), and
   the references are runs of consecutive numbers (``runtime.saver``'s
   encoding, usually one run per list). Storage stays O(n), as with Postgres.
2. **A snapshot on disk**, next to ``langgraph dev``'s own thread store
   (``.langgraph_api/deerflow_checkpoints.pckl`` in the server's working
   directory, so the thread list and the states always travel together): loaded
   at start, written off the event loop every few seconds while something
   changed and at shutdown (atomically: a temp file, then a rename). Messages no
   checkpoint references any more are dropped when the snapshot is written.

Why a snapshot and not SQLite: ``langgraph-checkpoint-sqlite`` stores each
checkpoint's whole channel values (O(n^2) for a conversation) and lacks the
server's fast paths (rollback, copy, prune); this keeps one implementation of
those, and the same interning idea as the Postgres saver. It is a development
store: one process, and up to a few seconds of writes lost on a hard kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import pickle
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from runtime.memory_saver import DeerflowMemorySaver
from runtime.saver import decode_refs, encode_refs

__all__ = [
    "SNAPSHOT_NAME",
    "DeerflowEmbeddedSaver",
    "InterningSerializer",
    "embedded_snapshot_path",
]

logger = logging.getLogger(__name__)

MESSAGE_REFS = "deerflow-message-refs"
SNAPSHOT_NAME = "deerflow_checkpoints.pckl"
_SNAPSHOT_VERSION = 1


def embedded_snapshot_path() -> Path | None:
    """Where the default mode keeps its snapshot; None when file persistence is off
    (``LANGGRAPH_DISABLE_FILE_PERSISTENCE=true``, as for ``langgraph dev``'s own store)."""
    if os.environ.get("LANGGRAPH_DISABLE_FILE_PERSISTENCE", "false").strip().lower() == "true":
        return None
    return Path.cwd() / ".langgraph_api" / SNAPSHOT_NAME


def _message_list(value: Any) -> list[BaseMessage] | None:
    if type(value) is list and value and all(isinstance(m, BaseMessage) for m in value):
        return value
    return None


class InterningSerializer:
    """A serializer that stores lists of messages as references into a message table."""

    def __init__(self, inner: Any | None = None) -> None:
        self.inner = inner if inner is not None else JsonPlusSerializer()
        self.messages: dict[int, tuple[str, bytes]] = {}
        self._seq_of: dict[bytes, int] = {}
        self._next = 1
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # e.g. with_msgpack_allowlist
        return getattr(self.inner, name)

    def _intern(self, typed: tuple[str, bytes]) -> int:
        digest = hashlib.sha256(typed[0].encode() + b"\x00" + typed[1]).digest()
        with self._lock:
            seq = self._seq_of.get(digest)
            if seq is None:
                seq = self._next
                self._next += 1
                self._seq_of[digest] = seq
                self.messages[seq] = typed
            return seq

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        messages = _message_list(obj)
        if messages is None:
            return self.inner.dumps_typed(obj)  # type: ignore[no-any-return]
        seqs = [self._intern(self.inner.dumps_typed(m)) for m in messages]
        return MESSAGE_REFS, encode_refs(seqs)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        if data[0] != MESSAGE_REFS:
            return self.inner.loads_typed(data)
        return [self.inner.loads_typed(self.messages[seq]) for seq in decode_refs(data[1])]

    def referenced(self, typed_values: Sequence[tuple[str, bytes]]) -> set[int]:
        seqs: set[int] = set()
        for typed in typed_values:
            if typed[0] == MESSAGE_REFS:
                seqs.update(decode_refs(typed[1]))
        return seqs

    def state(self, keep: set[int]) -> dict[str, Any]:
        with self._lock:
            return {
                "messages": {seq: t for seq, t in self.messages.items() if seq in keep},
                "next": self._next,
            }

    def restore(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.messages = dict(state["messages"])
            self._next = int(state["next"])
            self._seq_of = {
                hashlib.sha256(t[0].encode() + b"\x00" + t[1]).digest(): seq
                for seq, t in self.messages.items()
            }

    def drop_unreferenced(self, keep: set[int]) -> int:
        with self._lock:
            doomed = [seq for seq in self.messages if seq not in keep]
            for seq in doomed:
                typed = self.messages.pop(seq)
                self._seq_of.pop(hashlib.sha256(typed[0].encode() + b"\x00" + typed[1]).digest())
            return len(doomed)


class DeerflowEmbeddedSaver(DeerflowMemorySaver):
    """``DeerflowMemorySaver`` with interned messages and an on-disk snapshot.

    Args:
        path: The snapshot file (None: memory only). Use ``async with
            saver.persisted(interval)`` to load it, flush it while serving and
            write it at the end.
    """

    def __init__(self, *, path: Path | None = None) -> None:
        self.interner = InterningSerializer()
        super().__init__(serde=self.interner)
        self.path = path
        self._changes = 0
        self._saved_changes = 0

    # Every mutation bumps the change counter the flush loop watches.
    def put(self, *args: Any, **kwargs: Any) -> Any:
        self._changes += 1
        return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        self._changes += 1
        super().put_writes(*args, **kwargs)

    def delete_thread(self, thread_id: str) -> None:
        self._changes += 1
        super().delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._changes += 1
        super().delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._changes += 1
        super().copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._changes += 1
        super().prune(thread_ids, strategy=strategy)

    # --- the snapshot -------------------------------------------------------

    def _capture(self) -> dict[str, Any]:
        """A consistent copy of the tables (cheap: references, not bytes). Call on the
        thread that mutates the saver (the event loop), then pickle it elsewhere."""
        storage = {
            thread: {ns: dict(checkpoints) for ns, checkpoints in namespaces.items()}
            for thread, namespaces in self.storage.items()
        }
        writes = {key: dict(value) for key, value in self.writes.items()}
        blobs = dict(self.blobs)
        typed = list(blobs.values()) + [w[2] for ws in writes.values() for w in ws.values()]
        keep = self.interner.referenced(typed)
        self.interner.drop_unreferenced(keep)
        return {
            "version": _SNAPSHOT_VERSION,
            "storage": storage,
            "writes": writes,
            "blobs": blobs,
            "interned": self.interner.state(keep),
        }

    def save(self) -> None:
        """Write the snapshot now (blocking; the flush loop runs it off the loop)."""
        if self.path is not None:
            _write_snapshot(self.path, self._capture())

    def load(self) -> bool:
        """Read the snapshot if there is one (blocking). A file that cannot be read is
        set aside as ``*.unreadable`` and the saver starts empty, with a warning."""
        if self.path is None or not self.path.is_file():
            return False
        try:
            with self.path.open("rb") as handle:
                data = pickle.load(handle)
            if data.get("version") != _SNAPSHOT_VERSION:
                raise ValueError(f"unknown snapshot version {data.get('version')!r}")
        except Exception as exc:
            aside = self.path.with_suffix(self.path.suffix + ".unreadable")
            logger.warning("checkpointer: cannot read %s (%s); moved to %s", self.path, exc, aside)
            with contextlib.suppress(OSError):
                self.path.replace(aside)
            return False
        self.interner.restore(data["interned"])
        for thread, namespaces in data["storage"].items():
            for ns, checkpoints in namespaces.items():
                self.storage[thread][ns].update(checkpoints)
        for key, value in data["writes"].items():
            self.writes[key].update(value)
        self.blobs.update(data["blobs"])
        return True

    @contextlib.asynccontextmanager
    async def persisted(self, interval: float = 5.0) -> AsyncIterator[DeerflowEmbeddedSaver]:
        """Load the snapshot, keep it current every ``interval`` seconds while something
        changed, and write it once more on exit."""
        if self.path is None:
            yield self
            return
        if await asyncio.to_thread(self.load):
            logger.info("checkpointer: restored threads from %s", self.path)
        stop = asyncio.Event()

        async def flush_loop() -> None:
            while not stop.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=interval)
                await self.aflush()

        task = asyncio.create_task(flush_loop())
        try:
            yield self
        finally:
            stop.set()
            await task
            await self.aflush()

    async def aflush(self) -> None:
        """Write the snapshot if anything changed since the last one."""
        if self.path is None or self._changes == self._saved_changes:
            return
        changes = self._changes
        snapshot = self._capture()  # on the loop: no mutation can interleave
        try:
            await asyncio.to_thread(_write_snapshot, self.path, snapshot)
        except Exception:
            logger.exception("checkpointer: could not write %s", self.path)
            return
        self._saved_changes = changes


def _write_snapshot(path: Path, snapshot: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    with temporary.open("wb") as handle:
        pickle.dump(snapshot, handle, protocol=pickle.HIGHEST_PROTOCOL)
    temporary.replace(path)
