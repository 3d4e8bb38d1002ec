"""The ``database`` config section and the shared pool (``runtime/postgres.py``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from langchain_core.runnables import RunnableConfig
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from runtime.config import ConfigError, DatabaseConfig, load_settings
from runtime.postgres import (
    PostgresUnavailableError,
    _ensure_schema,
    build_conninfo,
    describe_target,
    run_setup,
    shared_pool,
)
from runtime.saver import DeerflowPostgresSaver
from tests.support.postgres import admin_uri, fresh_database
from tests.support.scripted import ai_text, write_config
from tests.support.server import PROJECT_ROOT

SECRET = "s3cret-pw"


def db_config(uri: str, **extra: Any) -> DatabaseConfig:
    return DatabaseConfig.model_validate({"uri": uri, **extra})


# ------------------------------------------------------------------ config


def test_database_section_defaults_are_pooler_safe() -> None:
    db = DatabaseConfig()
    assert db.uri is None
    assert db.prepare_threshold is None
    assert db.pool.check is True
    assert db.keepalives.enabled is True


def test_the_documented_database_section_matches_the_defaults() -> None:
    example = yaml.safe_load((PROJECT_ROOT / "config.example.yaml").read_text(encoding="utf-8"))
    assert DatabaseConfig.model_validate(example["database"]) == DatabaseConfig()


def test_conninfo_adds_timeouts_keepalives_and_schema_but_the_uri_wins() -> None:
    db = db_config(
        "postgresql://app@db.internal:6432/deer?application_name=mine",
        schema="deerflow",
        connect_timeout=4,
        keepalives={"idle": 11, "interval": 3, "count": 2},
    )
    info = conninfo_to_dict(build_conninfo(db))
    assert info["application_name"] == "mine"
    assert info["connect_timeout"] == "4"
    assert (info["keepalives"], info["keepalives_idle"]) == ("1", "11")
    assert (info["keepalives_interval"], info["keepalives_count"]) == ("3", "2")
    assert info["options"] == "-c search_path=deerflow"

    plain = conninfo_to_dict(
        build_conninfo(db_config("postgresql://h/d", keepalives={"enabled": False}))
    )
    assert "keepalives" not in plain and "options" not in plain


def test_targets_never_show_the_password() -> None:
    target = describe_target(f"postgresql://app:{SECRET}@db:5433/deer")
    assert target == "app@db:5433/deer"
    assert SECRET not in describe_target("not a uri ::: at all")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"uri": f"mysql://app:{SECRET}@h/db"},
            "database.uri: Value error, must be a postgresql://",
        ),
        ({"uri": f"postgresql://app:{SECRET}@h/db?bogus_option=1"}, "not a valid Postgres"),
        ({"uri": f"app:{SECRET} at h"}, "not a valid Postgres"),
        ({"schema": "drop table;"}, "database.schema: Value error, must be a plain SQL"),
        ({"pool": {"min_size": 5, "max_size": 2}}, "max_size must be >= min_size"),
        ({"pool": {"timeout": 0}}, "database.pool.timeout"),
        ({"poool": {}}, "database.poool: unknown key"),
    ],
)
def test_bad_database_config_is_a_clear_error_without_secrets(
    tmp_path: Path, section: dict[str, Any], message: str
) -> None:
    path = write_config(tmp_path, [ai_text("hi")], database=section)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert message in str(info.value)
    assert SECRET not in str(info.value)


def test_environment_overrides_uri_and_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, [ai_text("hi")], database={"uri": "postgresql://file/db"})
    monkeypatch.setenv("DEERFLOW_POSTGRES_URI", "postgresql://env/db")
    monkeypatch.setenv("DEERFLOW_POSTGRES_SCHEMA", "tenant_a")
    db = load_settings(path).database
    assert (db.uri, db.schema_name) == ("postgresql://env/db", "tenant_a")


# -------------------------------------------------------------------- pool


@pytest.mark.postgres
async def test_one_pool_per_process_closed_by_its_last_user(postgres_uri: str) -> None:
    db = db_config(postgres_uri)
    async with shared_pool(db) as (first, entry):
        async with shared_pool(db) as (second, same_entry):
            assert second is first and same_entry is entry
            assert entry.users == 2
        assert not first.closed
    assert first.closed


@pytest.mark.postgres
async def test_setup_runs_once_per_process(postgres_uri: str) -> None:
    db = db_config(postgres_uri)
    calls: list[str] = []

    async def setup() -> None:
        calls.append("setup")

    async with shared_pool(db) as (_, entry):
        await run_setup(entry, "checkpointer", db, setup, {})
        await run_setup(entry, "checkpointer", db, setup, {})
        await run_setup(entry, "store", db, setup, {})
    assert calls == ["setup", "setup"]

    skipped = db_config(postgres_uri, setup=False)
    async with shared_pool(skipped) as (_, entry):
        await run_setup(entry, "checkpointer", skipped, setup, {})
    assert calls == ["setup", "setup"]


async def test_an_unreachable_server_fails_at_startup_with_its_address() -> None:
    db = db_config(f"postgresql://app:{SECRET}@127.0.0.1:1/deer", connect_timeout=1)
    started = time.monotonic()
    with pytest.raises(PostgresUnavailableError) as info:
        async with shared_pool(db):
            pass
    assert "cannot connect to Postgres at app@127.0.0.1:1/deer" in str(info.value)
    assert SECRET not in str(info.value)
    assert time.monotonic() - started < 30


@pytest.mark.postgres
async def test_a_schema_the_connection_does_not_use_is_refused(postgres_uri: str) -> None:
    """If a pooler drops the search_path startup option, setup stops instead of
    silently creating the tables in ``public``."""
    db = db_config(postgres_uri, schema="deerflow_expected")
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        postgres_uri, kwargs={"autocommit": True, "row_factory": dict_row}, open=False
    )
    await pool.open()
    try:
        with pytest.raises(PostgresUnavailableError, match="search_path startup option"):
            await _ensure_schema(pool, db)
    finally:
        await pool.close()


@contextlib.contextmanager
def connections_blocked(dbname: str) -> Iterator[None]:
    """What a stopped server looks like to one database: new connections are
    refused and existing ones are cut. Other databases are not disturbed."""
    with psycopg.connect(admin_uri(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname))
        )
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )
        try:
            yield
        finally:
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(dbname))
            )


@pytest.mark.postgres
async def test_saver_survives_a_database_outage() -> None:
    """Down: a clear error after ``pool.timeout``. Back: the next call works."""
    with fresh_database("deerflow_outage") as uri:
        dbname = str(conninfo_to_dict(uri)["dbname"])
        db = db_config(uri, pool={"timeout": 2, "reconnect_timeout": 1})
        async with shared_pool(db) as (pool, _):
            saver = DeerflowPostgresSaver(pool)
            await saver.setup()
            config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            assert await saver.aget_tuple(config) is None
            with connections_blocked(dbname):
                with pytest.raises(PostgresUnavailableError) as info:
                    await saver.aget_tuple(config)
                assert "checkpoint database unavailable at" in str(info.value)
                assert dbname in str(info.value)
            assert await saver.aget_tuple(config) is None
