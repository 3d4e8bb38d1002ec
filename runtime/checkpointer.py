"""``make_checkpointer``: registered as ``checkpointer.path`` in ``langgraph.json``.

The server enters this async context manager once per process (per event loop)
and keeps the saver for its lifetime: a ``DeerflowPostgresSaver`` over the
shared pool when a Postgres URI is configured (``DEERFLOW_POSTGRES_URI`` or
``database.uri``; never ``DATABASE_URI``, which the server owns), the embedded
``DeerflowEmbeddedSaver`` otherwise (the development default: in memory with a
snapshot beside ``langgraph dev``'s own thread store, so threads survive a restart).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph.checkpoint.base import BaseCheckpointSaver

from runtime.config import aget_settings
from runtime.embedded_saver import DeerflowEmbeddedSaver, embedded_snapshot_path
from runtime.postgres import describe_target, run_setup, shared_pool
from runtime.saver import DeerflowPostgresSaver

__all__ = ["make_checkpointer"]

logger = logging.getLogger(__name__)


@asynccontextmanager
async def make_checkpointer() -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Yield the process's checkpointer; the pool closes when the server stops."""
    settings = await aget_settings()
    db = settings.database
    if not db.uri:
        path = embedded_snapshot_path()
        logger.info(
            "checkpointer: embedded, %s (set DEERFLOW_POSTGRES_URI for Postgres)",
            f"kept in {path}" if path else "in memory only",
        )
        async with DeerflowEmbeddedSaver(path=path).persisted() as embedded:
            yield embedded
        return
    async with shared_pool(db) as (pool, entry):
        saver = DeerflowPostgresSaver(pool)
        await run_setup(entry, "checkpointer", db, saver.setup, saver.required_migrations())
        logger.info("checkpointer: postgres at %s", describe_target(str(pool.conninfo)))
        yield saver
