"""One Postgres connection pool per process (per event loop), shared by the
checkpointer and the store, built from the ``database`` config section.

Why shared and reference-counted: ``langgraph_api`` enters the checkpointer and
the store factories separately (and loads each file as its own module), but a
process should hold one pool sized by ``database.pool``. The first factory to
enter opens it; the last to exit closes it.

Why these connection settings: ``autocommit`` and ``dict_row`` are what the
LangGraph Postgres savers expect; ``prepare_threshold=None`` (the default) keeps
server-side prepared statements off, which a transaction pooler requires; TCP
keepalives and the pool's connection check turn a restarted or vanished server
into a fresh connection instead of a failed run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from runtime.config import DatabaseConfig

__all__ = [
    "PostgresUnavailableError",
    "SchemaNotMigratedError",
    "build_conninfo",
    "connection_kwargs",
    "describe_target",
    "migration_versions",
    "run_setup",
    "shared_pool",
]

logger = logging.getLogger(__name__)

# Errors a concurrent first-time setup by another process can raise; the
# migrations are idempotent, so retrying converges.
_SETUP_RACE_ERRORS: tuple[type[Exception], ...] = (
    psycopg.errors.UniqueViolation,
    psycopg.errors.DuplicateTable,
    psycopg.errors.DuplicateObject,
    psycopg.errors.DuplicateSchema,
)
_SETUP_ATTEMPTS = 5


class PostgresUnavailableError(RuntimeError):
    """The configured Postgres cannot be reached (down, refusing, or pool exhausted)."""


class SchemaNotMigratedError(RuntimeError):
    """``database.setup: verify`` found our tables older than this release needs."""


def describe_target(conninfo: str) -> str:
    """``user@host:port/dbname`` of a conninfo, never its password."""
    try:
        info = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "(unparsable Postgres URI)"
    user = info.get("user")
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    dbname = info.get("dbname") or user or "?"
    prefix = f"{user}@" if user else ""
    return f"{prefix}{host}:{port}/{dbname}"


def build_conninfo(db: DatabaseConfig) -> str:
    """The connection string: the URI plus config defaults it does not set itself.

    Parameters written in the URI win, so an operator can tune one connection
    without touching the config file.
    """
    if not db.uri:
        raise ValueError("database.uri is not set")
    given = conninfo_to_dict(db.uri)
    extra: dict[str, Any] = {
        "connect_timeout": db.connect_timeout,
        "application_name": db.application_name,
    }
    if db.keepalives.enabled:
        extra.update(
            keepalives=1,
            keepalives_idle=db.keepalives.idle,
            keepalives_interval=db.keepalives.interval,
            keepalives_count=db.keepalives.count,
        )
    params = {k: v for k, v in extra.items() if k not in given}
    if db.schema_name:
        # A startup parameter, not a session SET: a transaction pooler would
        # hand a SET to some other client. Setup verifies it took effect.
        search_path = f"-c search_path={db.schema_name}"
        options = given.get("options")
        params["options"] = f"{options} {search_path}" if options else search_path
    return make_conninfo(db.uri, **params)


def connection_kwargs(db: DatabaseConfig) -> dict[str, Any]:
    """Per-connection settings the LangGraph savers and the store rely on."""
    return {
        "autocommit": True,
        "row_factory": dict_row,
        "prepare_threshold": db.prepare_threshold,
    }


@dataclass
class _PoolEntry:
    pool: AsyncConnectionPool[AsyncConnection[DictRow]]
    users: int = 0
    setup_done: set[str] = field(default_factory=set)
    setup_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


# Keyed by (event loop, conninfo): a psycopg async pool belongs to one loop.
_POOLS: dict[tuple[int, str], _PoolEntry] = {}
_POOLS_LOCK: dict[int, asyncio.Lock] = {}


def _loop_lock(loop_key: int) -> asyncio.Lock:
    lock = _POOLS_LOCK.get(loop_key)
    if lock is None:
        lock = _POOLS_LOCK[loop_key] = asyncio.Lock()
    return lock


async def _open_pool(db: DatabaseConfig, conninfo: str) -> AsyncConnectionPool[Any]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        conninfo,
        kwargs=connection_kwargs(db),
        min_size=db.pool.min_size,
        max_size=db.pool.max_size,
        timeout=db.pool.timeout,
        max_idle=db.pool.max_idle,
        max_lifetime=db.pool.max_lifetime,
        reconnect_timeout=db.pool.reconnect_timeout,
        check=AsyncConnectionPool.check_connection if db.pool.check else None,
        name="deerflow",
        open=False,
    )
    target = describe_target(conninfo)
    try:
        # One direct attempt first: it fails at once with the server's reason
        # (refused, bad password, no such database) instead of a pool timeout.
        probe = await AsyncConnection.connect(conninfo, **connection_kwargs(db))
        await probe.close()
        await pool.open(wait=True, timeout=float(db.connect_timeout) + 5.0)
        # Fail at startup, with the reason, if the server refuses us.
        async with pool.connection(timeout=float(db.connect_timeout) + 5.0) as conn:
            await conn.execute("SELECT 1")
    except (PoolTimeout, psycopg.OperationalError) as exc:
        await pool.close()
        raise PostgresUnavailableError(
            f"cannot connect to Postgres at {target}: {_reason(exc)}"
        ) from exc
    except BaseException:
        await pool.close()
        raise
    logger.info(
        "postgres pool open: %s (min %d, max %d)", target, db.pool.min_size, db.pool.max_size
    )
    return pool


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.asynccontextmanager
async def shared_pool(
    db: DatabaseConfig,
) -> AsyncIterator[tuple[AsyncConnectionPool[AsyncConnection[DictRow]], _PoolEntry]]:
    """Enter the process's pool for ``db`` (opened by the first user, closed by the last)."""
    conninfo = build_conninfo(db)
    loop_key = id(asyncio.get_running_loop())
    key = (loop_key, conninfo)
    async with _loop_lock(loop_key):
        entry = _POOLS.get(key)
        if entry is None:
            entry = _PoolEntry(pool=await _open_pool(db, conninfo))
            _POOLS[key] = entry
        entry.users += 1
    try:
        yield entry.pool, entry
    finally:
        async with _loop_lock(loop_key):
            entry.users -= 1
            if entry.users == 0:
                _POOLS.pop(key, None)
                await entry.pool.close()
                logger.info("postgres pool closed: %s", describe_target(conninfo))


async def run_setup(
    entry: _PoolEntry,
    name: str,
    db: DatabaseConfig,
    setup: Callable[[], Awaitable[None]],
    required: Mapping[str, int],
) -> None:
    """Bring ``name``'s tables up to date once per process, as ``database.setup`` says.

    ``migrate`` runs ``setup`` (schema + migrations). Another replica may be
    migrating at the same moment; the migrations are idempotent, so a lost race
    is retried rather than reported. ``verify`` changes nothing and raises
    ``SchemaNotMigratedError`` unless every migrations table in ``required``
    (table -> the last version this release knows) is at least that version:
    the migration job (``python -m runtime.migrate``) runs the DDL instead.
    ``off`` trusts the operator.
    """
    async with entry.setup_lock:
        if name in entry.setup_done:
            return
        if db.setup == "migrate":
            await _ensure_schema(entry.pool, db)
            for attempt in range(1, _SETUP_ATTEMPTS + 1):
                try:
                    await setup()
                    break
                except _SETUP_RACE_ERRORS:
                    if attempt == _SETUP_ATTEMPTS:
                        raise
                    await asyncio.sleep(0.2 * attempt)
        elif db.setup == "verify":
            await _verify_migrated(entry.pool, db, name, required)
        entry.setup_done.add(name)


async def migration_versions(
    pool: AsyncConnectionPool[Any], tables: Mapping[str, int]
) -> dict[str, int]:
    """The newest applied version in each migrations table (-1: none, or no table)."""
    versions: dict[str, int] = {}
    async with pool.connection() as conn:
        for table in tables:
            present = await (
                await conn.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (table,))
            ).fetchone()
            if not present or not present["present"]:
                versions[table] = -1
                continue
            row = await (
                await conn.execute(
                    sql.SQL("SELECT max(v) AS v FROM {}").format(sql.Identifier(table))
                )
            ).fetchone()
            value = row["v"] if row else None
            versions[table] = -1 if value is None else int(value)
    return versions


async def _verify_migrated(
    pool: AsyncConnectionPool[Any], db: DatabaseConfig, name: str, required: Mapping[str, int]
) -> None:
    target = describe_target(str(pool.conninfo))
    if db.schema_name:
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT current_schema() AS s")).fetchone()
        current = row["s"] if row else None
        if current is None:
            raise SchemaNotMigratedError(
                f"{name}: schema {db.schema_name!r} does not exist at {target}; run the "
                "migration job (python -m runtime.migrate) before starting the server"
            )
        if current != db.schema_name:
            raise PostgresUnavailableError(_search_path_message(db.schema_name, current))
    versions = await migration_versions(pool, required)
    behind = [
        f"{table} at v{versions[table]}, needs v{version}"
        for table, version in required.items()
        if versions[table] < version
    ]
    if behind:
        raise SchemaNotMigratedError(
            f"{name}: tables at {target} are older than this release ({'; '.join(behind)}); "
            "run the migration job (python -m runtime.migrate) before rolling out"
        )


def _search_path_message(schema: str, current: str | None) -> str:
    return (
        f"database.schema is {schema!r} but the connection's current schema is "
        f"{current!r}: the search_path startup option did not take effect (a "
        "transaction pooler may drop it; configure the pooler to pass or track "
        "search_path, or set it on the database role)"
    )


async def _ensure_schema(pool: AsyncConnectionPool[Any], db: DatabaseConfig) -> None:
    if not db.schema_name:
        return
    async with pool.connection() as conn:
        with contextlib.suppress(*_SETUP_RACE_ERRORS):
            await conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(db.schema_name))
            )
        row = await (await conn.execute("SELECT current_schema() AS s")).fetchone()
    current = row["s"] if row else None
    if current != db.schema_name:
        raise PostgresUnavailableError(_search_path_message(db.schema_name, current))
