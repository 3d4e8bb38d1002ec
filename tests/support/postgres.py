"""A fresh PostgreSQL database per test session, on the real local server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

__all__ = ["admin_uri", "fresh_database", "postgres_available"]


def admin_uri() -> str:
    return os.environ.get(
        "DEERFLOW_TEST_POSTGRES_URI", "postgresql://postgres@127.0.0.1:5432/postgres"
    )


def postgres_available() -> str | None:
    """None when reachable, else the reason it is not."""
    try:
        with psycopg.connect(admin_uri(), connect_timeout=3) as conn:
            conn.execute("select 1")
    except psycopg.Error as exc:
        return f"PostgreSQL not reachable at {admin_uri()}: {exc}"
    return None


def _with_database(uri: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(uri)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo("", **{k: v for k, v in info.items() if v is not None})


@contextmanager
def fresh_database(prefix: str = "deerflow_test") -> Iterator[str]:
    """Create a uniquely named database, yield its URI, drop it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_uri(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_database(admin_uri(), name)
    finally:
        with psycopg.connect(admin_uri(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
