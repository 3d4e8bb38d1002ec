"""``make_store``: registered as ``store.path`` in ``langgraph.json``.

The long-term store (memory and per-user data of later features): an
``AsyncPostgresStore`` on the same pool and settings as the checkpointer when a
Postgres URI is configured, LangGraph's ``InMemoryStore`` otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres.aio import AsyncPostgresStore

from runtime.config import aget_settings
from runtime.postgres import describe_target, run_setup, shared_pool

__all__ = ["make_store"]

logger = logging.getLogger(__name__)


@asynccontextmanager
async def make_store() -> AsyncIterator[BaseStore]:
    """Yield the process's store; the shared pool closes with its last user."""
    settings = await aget_settings()
    db = settings.database
    if not db.uri:
        logger.info("store: in-memory (set DEERFLOW_POSTGRES_URI to persist it)")
        yield InMemoryStore()
        return
    async with shared_pool(db) as (pool, entry):
        store = AsyncPostgresStore(pool)
        await run_setup(entry, "store", db, store.setup)
        logger.info("store: postgres at %s", describe_target(str(pool.conninfo)))
        yield store
