"""``make_store`` (``store.path`` in ``langgraph.json``)."""

from __future__ import annotations

import uuid

import pytest
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres.aio import AsyncPostgresStore

from runtime.config import reset_settings_cache
from runtime.store import make_store


async def test_without_a_uri_the_store_is_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEERFLOW_POSTGRES_URI", raising=False)
    reset_settings_cache()
    async with make_store() as store:
        assert type(store) is InMemoryStore


@pytest.mark.postgres
async def test_postgres_store_keeps_items_across_factory_entries(
    postgres_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What one process writes, the next one (a new pool) reads back."""
    monkeypatch.setenv("DEERFLOW_POSTGRES_URI", postgres_uri)
    reset_settings_cache()
    user = uuid.uuid4().hex
    async with make_store() as store:
        assert isinstance(store, AsyncPostgresStore)
        await store.aput(("users", user, "memory"), "fact-1", {"text": "likes tea"})
        await store.aput(("users", user, "memory"), "fact-2", {"text": "lives in Oslo"})
    async with make_store() as store:
        found = await store.asearch(("users", user))
        assert sorted(item.key for item in found) == ["fact-1", "fact-2"]
        await store.adelete(("users", user, "memory"), "fact-1")
        assert await store.aget(("users", user, "memory"), "fact-1") is None
