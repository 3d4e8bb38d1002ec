"""Memories in the LangGraph store: one item per memory, under the user's own namespace.

The namespace is ``user_store_namespace(user_id, "memories")``, i.e.
``(safe user id, "memories")``: the store's auth handler forces every API call
under the caller's safe id, so a user's API calls, their runs and the
``/memory`` routes all address the same items, and nobody else's.

An item's value: ``content``, ``category``, ``source_thread``, ``created_at``,
``updated_at`` (ISO timestamps), ``confidence`` (0-1).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import BaseStore, SearchItem

from auth.identity import user_store_namespace

__all__ = [
    "CATEGORIES",
    "MEMORY_NAMESPACE",
    "Memory",
    "add_memory",
    "delete_memory",
    "list_memories",
    "memory_namespace",
    "search_memories",
    "trim_memories",
    "update_memory",
]

MEMORY_NAMESPACE = "memories"
CATEGORIES = ("preference", "fact", "decision", "project", "other")
_LIST_LIMIT = 1000
_WORD = re.compile(r"[a-z0-9]{3,}")
_RANK_INLINE = 200


def memory_namespace(user_id: str) -> tuple[str, ...]:
    return user_store_namespace(user_id, MEMORY_NAMESPACE)


@dataclass(frozen=True)
class Memory:
    id: str
    content: str
    category: str
    source_thread: str | None
    created_at: str
    updated_at: str
    confidence: float
    score: float | None = None

    @classmethod
    def from_item(cls, item: Any) -> Memory | None:
        """A memory from a store item; None for a malformed one (skipped, never raised)."""
        value = getattr(item, "value", None)
        if not isinstance(value, dict) or not isinstance(value.get("content"), str):
            return None
        try:
            confidence = float(value.get("confidence", 0.5))
        except (TypeError, ValueError):
            confidence = 0.5
        category = value.get("category")
        return cls(
            id=str(item.key),
            content=value["content"],
            category=category if category in CATEGORIES else "other",
            source_thread=value.get("source_thread")
            if isinstance(value.get("source_thread"), str)
            else None,
            created_at=str(value.get("created_at") or ""),
            updated_at=str(value.get("updated_at") or value.get("created_at") or ""),
            confidence=min(1.0, max(0.0, confidence)),
            score=getattr(item, "score", None) if isinstance(item, SearchItem) else None,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "content": self.content,
            "category": self.category,
            "source_thread": self.source_thread,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "confidence": self.confidence,
        }


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _index(indexed: bool) -> Any:
    return None if indexed else False


async def add_memory(
    store: BaseStore,
    user_id: str,
    content: str,
    *,
    category: str = "other",
    confidence: float = 0.7,
    source_thread: str | None = None,
    indexed: bool = False,
) -> str:
    key = uuid.uuid4().hex
    now = _now()
    await store.aput(
        memory_namespace(user_id),
        key,
        {
            "content": content,
            "category": category if category in CATEGORIES else "other",
            "source_thread": source_thread,
            "created_at": now,
            "updated_at": now,
            "confidence": min(1.0, max(0.0, float(confidence))),
        },
        index=_index(indexed),
    )
    return key


async def update_memory(
    store: BaseStore,
    user_id: str,
    memory_id: str,
    *,
    content: str,
    confidence: float | None = None,
    indexed: bool = False,
) -> bool:
    """Rewrite an existing memory of this user; False when there is none with that id."""
    namespace = memory_namespace(user_id)
    item = await store.aget(namespace, memory_id)
    current = Memory.from_item(item) if item is not None else None
    if current is None:
        return False
    await store.aput(
        namespace,
        memory_id,
        {
            **current.as_dict(),
            "content": content,
            "confidence": current.confidence
            if confidence is None
            else min(1.0, max(0.0, confidence)),
            "updated_at": _now(),
        },
        index=_index(indexed),
    )
    return True


async def delete_memory(store: BaseStore, user_id: str, memory_id: str) -> bool:
    namespace = memory_namespace(user_id)
    if await store.aget(namespace, memory_id) is None:
        return False
    await store.adelete(namespace, memory_id)
    return True


async def list_memories(
    store: BaseStore, user_id: str, *, limit: int = _LIST_LIMIT
) -> list[Memory]:
    """The user's memories, newest first."""
    items = await store.asearch(memory_namespace(user_id), limit=limit)
    memories = [m for item in items if (m := Memory.from_item(item)) is not None]
    return sorted(memories, key=lambda m: m.updated_at, reverse=True)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


async def search_memories(
    store: BaseStore,
    user_id: str,
    query: str,
    *,
    limit: int = 5,
    semantic: bool = False,
) -> list[Memory]:
    """The memories most relevant to ``query``.

    With an embedding index: the store's semantic search. Without one: keyword
    overlap with the query, ties (and no overlap at all) broken by recency,
    over the newest ``_LIST_LIMIT`` memories.
    """
    if limit <= 0:
        return []
    if semantic and query.strip():
        items = await store.asearch(memory_namespace(user_id), query=query, limit=limit)
        return [m for item in items if (m := Memory.from_item(item)) is not None]
    memories = await list_memories(store, user_id)
    if len(memories) > _RANK_INLINE:  # CPU work of a few ms: not on the event loop
        return await asyncio.to_thread(_rank, memories, query, limit)
    return _rank(memories, query, limit)


def _rank(memories: list[Memory], query: str, limit: int) -> list[Memory]:
    wanted = _words(query)
    ranked = sorted(
        enumerate(memories),
        key=lambda pair: (-len(wanted & _words(pair[1].content)), pair[0]),
    )
    return [m for _, m in ranked[:limit]]


async def trim_memories(store: BaseStore, user_id: str, keep: int) -> int:
    """Delete the oldest memories beyond ``keep``; returns how many went."""
    memories = await list_memories(store, user_id, limit=keep + 200)
    extra: Sequence[Memory] = memories[keep:]
    for memory in extra:
        await store.adelete(memory_namespace(user_id), memory.id)
    return len(extra)
