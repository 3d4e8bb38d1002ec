"""``DeerflowMemorySaver``: the in-memory development checkpointer.

``langgraph_api`` warns and falls back to slower paths for a custom
checkpointer that lacks ``adelete_for_runs``, ``acopy_thread`` or ``aprune``;
LangGraph's ``InMemorySaver`` has none of them. This subclass adds them over the
same three dicts, so the development default behaves like production (rollback,
copy and prune work) and the server log stays clean. Everything lives in
process memory and is lost on restart: use Postgres to keep conversations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

__all__ = ["DeerflowMemorySaver"]

_DELETE_STRATEGIES = frozenset({"delete", "delete_all"})


class DeerflowMemorySaver(InMemorySaver):
    """``InMemorySaver`` plus the delete-for-runs, copy and prune fast paths."""

    # ``storage[thread][ns][checkpoint_id] = (checkpoint, metadata, parent_id)``
    # (typed serialisations), ``writes[(thread, ns, checkpoint_id)]`` and
    # ``blobs[(thread, ns, channel, version)]`` are the base class's layout.

    def _versions(self, checkpoint_typed: tuple[str, bytes]) -> dict[str, Any]:
        checkpoint = self.serde.loads_typed(checkpoint_typed)
        return dict(checkpoint.get("channel_versions") or {})

    def _drop_checkpoints(self, thread_id: str, ns: str, doomed: set[str]) -> None:
        """Delete checkpoints, their writes, and blobs only they used; splice parents."""
        checkpoints = self.storage[thread_id][ns]
        parent_of = {cid: checkpoints[cid][2] for cid in doomed if cid in checkpoints}
        freed: set[tuple[str, str]] = set()
        for cid in parent_of:
            freed.update((ch, str(v)) for ch, v in self._versions(checkpoints[cid][0]).items())
            del checkpoints[cid]
            self.writes.pop((thread_id, ns, cid), None)
        for cid, (checkpoint, metadata, parent) in list(checkpoints.items()):
            ancestor, seen = parent, set()
            while ancestor in parent_of and ancestor not in seen:
                seen.add(ancestor)
                ancestor = parent_of[ancestor]
            if ancestor != parent:
                checkpoints[cid] = (checkpoint, metadata, ancestor)
        for checkpoint, _, _ in checkpoints.values():
            freed.difference_update((ch, str(v)) for ch, v in self._versions(checkpoint).items())
        for channel, version in freed:
            self.blobs.pop((thread_id, ns, channel, version), None)
        if not checkpoints:
            del self.storage[thread_id][ns]

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) created by ``run_ids``."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for thread_id in list(self.storage):
            for ns in list(self.storage[thread_id]):
                doomed = {
                    cid
                    for cid, (_, metadata, _) in self.storage[thread_id][ns].items()
                    if str(self.serde.loads_typed(metadata).get("run_id")) in wanted
                }
                if doomed:
                    self._drop_checkpoints(thread_id, ns, doomed)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, write and blob of a thread to a new thread id."""
        source, target = str(source_thread_id), str(target_thread_id)
        if source == target:
            raise ValueError("copy_thread: source and target thread are the same")
        if self.storage.get(target):
            raise ValueError(f"copy_thread: target thread {target!r} already has checkpoints")
        for ns, checkpoints in list(self.storage.get(source, {}).items()):
            for cid, (checkpoint, metadata_typed, parent) in checkpoints.items():
                metadata = self.serde.loads_typed(metadata_typed)
                if "thread_id" in metadata:
                    metadata = {**metadata, "thread_id": target}
                self.storage[target][ns][cid] = (
                    checkpoint,
                    self.serde.dumps_typed(metadata),
                    parent,
                )
        for (thread_id, ns, cid), writes in list(self.writes.items()):
            if thread_id == source:
                self.writes[(target, ns, cid)] = dict(writes)
        for (thread_id, ns, channel, version), blob in list(self.blobs.items()):
            if thread_id == source:
                self.blobs[(target, ns, channel, version)] = blob

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: only each namespace's newest checkpoint stays.
        ``delete`` (or ``delete_all``): the threads go entirely."""
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread IDs, not a str")
        if strategy in _DELETE_STRATEGIES:
            for thread_id in thread_ids:
                self.delete_thread(str(thread_id))
            return
        if strategy != "keep_latest":
            raise ValueError(f"Unknown prune strategy: {strategy!r}")
        for thread_id in _strs(thread_ids):
            for ns in list(self.storage.get(thread_id, {})):
                checkpoints = self.storage[thread_id][ns]
                latest = max(checkpoints)
                self._drop_checkpoints(thread_id, ns, set(checkpoints) - {latest})
                if latest in self.storage[thread_id].get(ns, {}):
                    checkpoint, metadata, _ = self.storage[thread_id][ns][latest]
                    self.storage[thread_id][ns][latest] = (checkpoint, metadata, None)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


def _strs(values: Iterable[Any]) -> list[str]:
    return [str(v) for v in values]
