"""``python -m runtime.migrate``: bring our Postgres tables up to date, then exit.

The one-shot migration step of an upgrade (the Kubernetes Job in
``deploy/k8s/overlays/prod-migrate``): it reads the same config and environment
as the server (``DEERFLOW_CONFIG``, ``DEERFLOW_POSTGRES_URI``, ``DATABASE_URI``
for the own-schema default, ``DEERFLOW_POSTGRES_SCHEMA``) and runs the
checkpointer's and the store's ``setup()`` against that database, whatever
``database.setup`` says (that setting is for server processes). Both setups are
idempotent: running it again, or while another copy runs, changes nothing.

Output: one line on stdout on success, one line on stderr on failure, never the
password. Exit codes: 0 up to date; 1 the database failed (unreachable,
refused, a migration error); 2 the config is unusable (no URI, invalid config);
3 with ``--check``: the tables are older than this release (nothing changed).

The LangGraph Server's own tables (``DATABASE_URI``) are not ours: the server
migrates them itself when it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg.conninfo import conninfo_to_dict

from runtime.config import ConfigError, DatabaseConfig, Settings, load_settings
from runtime.postgres import (
    PostgresUnavailableError,
    describe_target,
    migration_versions,
    run_setup,
    shared_pool,
)
from runtime.saver import DeerflowPostgresSaver
from runtime.store import memory_index, store_required_migrations

__all__ = ["EXIT_BEHIND", "EXIT_CONFIG", "EXIT_DATABASE", "MigrationResult", "main", "migrate"]

EXIT_DATABASE = 1
EXIT_CONFIG = 2
EXIT_BEHIND = 3

_PROG = "deerflow-migrate"


@dataclass(frozen=True)
class MigrationResult:
    target: str
    schema: str
    versions: dict[str, int]
    required: dict[str, int]

    @property
    def behind(self) -> dict[str, int]:
        return {t: v for t, v in self.required.items() if self.versions.get(t, -1) < v}

    def summary(self) -> str:
        tables = ", ".join(f"{t} v{v}" for t, v in sorted(self.versions.items()))
        return f"{self.target} schema {self.schema}: {tables}"


def _job_database(db: DatabaseConfig) -> DatabaseConfig:
    # One connection is enough for a sequence of DDL; `setup` is forced on
    # (the server's `verify`/`off` describe what server processes do).
    pool = db.pool.model_copy(update={"min_size": 1, "max_size": 2})
    return db.model_copy(update={"setup": "migrate", "pool": pool})


async def migrate(settings: Settings, *, check_only: bool = False) -> MigrationResult:
    """Run (or, with ``check_only``, inspect) our migrations against ``settings.database``."""
    if not settings.database.uri:
        raise ConfigError("no Postgres is configured: set DEERFLOW_POSTGRES_URI (or database.uri)")
    db = _job_database(settings.database)
    index = memory_index(settings)
    required = {
        **DeerflowPostgresSaver.required_migrations(),
        **store_required_migrations(index),
    }
    async with shared_pool(db) as (pool, entry):
        if not check_only:
            saver = DeerflowPostgresSaver(pool)
            await run_setup(entry, "checkpointer", db, saver.setup, saver.required_migrations())
            store = AsyncPostgresStore(pool, index=cast(Any, index))
            await run_setup(entry, "store", db, store.setup, store_required_migrations(index))
        versions = await migration_versions(pool, required)
        target = describe_target(str(pool.conninfo))
    return MigrationResult(
        target=target,
        schema=db.schema_name or "public",
        versions=versions,
        required=required,
    )


def _scrub(message: str, uri: str | None) -> str:
    """One line, without the URI's password (defence in depth: no message should hold it)."""
    line = " ".join(message.split())
    if uri:
        try:
            password = conninfo_to_dict(uri).get("password")
        except Exception:  # an unparsable URI: drop it wholesale below
            password = None
        for secret in (password, uri):
            if secret:
                line = line.replace(str(secret), "***")
    return line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.migrate",
        description="Create or upgrade the checkpointer's and store's Postgres tables.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 3 if the tables are older than this release",
    )
    parser.add_argument("--verbose", action="store_true", help="log progress to stderr")
    args = parser.parse_args(argv)
    # Libraries log connection retries; the contract here is one line per outcome.
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.CRITICAL,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    uri = os.environ.get("DEERFLOW_POSTGRES_URI")
    try:
        settings = load_settings()
        uri = settings.database.uri
        result = asyncio.run(migrate(settings, check_only=args.check))
    except ConfigError as exc:
        print(f"{_PROG}: error: {_scrub(str(exc), uri)}", file=sys.stderr)
        return EXIT_CONFIG
    except PostgresUnavailableError as exc:
        print(f"{_PROG}: error: {_scrub(str(exc), uri)}", file=sys.stderr)
        return EXIT_DATABASE
    except Exception as exc:
        reason = _scrub(f"{type(exc).__name__}: {exc}", uri)
        print(f"{_PROG}: error: migration failed: {reason}", file=sys.stderr)
        return EXIT_DATABASE
    if args.check and result.behind:
        behind = ", ".join(
            f"{t} at v{result.versions.get(t, -1)}, needs v{v}" for t, v in result.behind.items()
        )
        print(f"{_PROG}: behind: {result.target} schema {result.schema}: {behind}")
        return EXIT_BEHIND
    verb = "up to date" if args.check else "migrated"
    print(f"{_PROG}: {verb}: {result.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
