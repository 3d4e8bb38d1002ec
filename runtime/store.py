"""``make_store``: registered as ``store.path`` in ``langgraph.json``.

The long-term store (memory and per-user data of later features): an
``AsyncPostgresStore`` on the same pool and settings as the checkpointer when a
Postgres URI is configured, LangGraph's ``InMemoryStore`` otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from langgraph.store.base import BaseStore, IndexConfig
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres.aio import AsyncPostgresStore

from runtime.config import ConfigError, Settings, aget_settings, import_object
from runtime.postgres import describe_target, run_setup, shared_pool

__all__ = ["make_store", "memory_index", "store_required_migrations"]

logger = logging.getLogger(__name__)


def memory_index(settings: Settings) -> IndexConfig | None:
    """The store's embedding index for semantic memory recall (``memory.embeddings``).

    None unless memory is enabled with an embeddings entry. Only the memory's
    ``content`` field is embedded. On Postgres the index needs the pgvector
    extension in the database.
    """
    config = settings.memory.embeddings
    if not settings.memory.enabled or config is None:
        return None
    factory = import_object(config.use, what="memory.embeddings.use")
    try:
        embeddings: Any = factory(**config.constructor_kwargs())
    except Exception as exc:
        raise ConfigError(f"memory.embeddings: cannot build {config.use} ({exc})") from exc
    return {"dims": config.dims, "embed": embeddings, "fields": ["content"]}


def store_required_migrations(index: IndexConfig | None) -> dict[str, int]:
    """Migrations table -> the last version the store's ``setup`` applies."""
    required = {"store_migrations": len(AsyncPostgresStore.MIGRATIONS) - 1}
    if index is not None:
        required["vector_migrations"] = len(AsyncPostgresStore.VECTOR_MIGRATIONS) - 1
    return required


@asynccontextmanager
async def make_store() -> AsyncIterator[BaseStore]:
    """Yield the process's store; the shared pool closes with its last user."""
    settings = await aget_settings()
    db = settings.database
    index = memory_index(settings)
    if not db.uri:
        logger.info("store: in-memory (set DEERFLOW_POSTGRES_URI to persist it)")
        yield InMemoryStore(index=index)
        return
    async with shared_pool(db) as (pool, entry):
        store = AsyncPostgresStore(pool, index=cast(Any, index))
        await run_setup(entry, "store", db, store.setup, store_required_migrations(index))
        logger.info("store: postgres at %s", describe_target(str(pool.conninfo)))
        yield store
