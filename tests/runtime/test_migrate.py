"""``python -m runtime.migrate``: the one-shot migration step of an upgrade."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from runtime.checkpointer import make_checkpointer
from runtime.config import OWN_SCHEMA, DatabaseConfig, reset_settings_cache
from runtime.migrate import EXIT_BEHIND, EXIT_CONFIG, EXIT_DATABASE
from runtime.postgres import SchemaNotMigratedError, run_setup, shared_pool
from runtime.saver import DeerflowPostgresSaver
from runtime.store import make_store
from tests.support.postgres import fresh_database
from tests.support.server import PROJECT_ROOT

SECRET = "s3cret-migrate-pw"


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real entry point, as the Job runs it (a separate process)."""
    return subprocess.run(
        [sys.executable, "-m", "runtime.migrate", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def _arun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``_run`` off the event loop (async tests must not block it)."""
    return await asyncio.to_thread(_run, *args, env=env)


def _env(**values: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DEERFLOW_POSTGRES_URI", "DATABASE_URI", "DEERFLOW_POSTGRES_SCHEMA"}
    }
    env.update(values)
    return env


@pytest.fixture
def fresh_uri(postgres_uri: str) -> Iterator[str]:
    """A database nobody migrated yet (``postgres_uri`` skips when Postgres is absent)."""
    with fresh_database("deerflow_migrate") as uri:
        yield uri


async def _tables(uri: str, schema: str) -> set[str]:
    async with await AsyncConnection.connect(uri, row_factory=dict_row) as conn:
        rows = await (
            await conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ).fetchall()
    return {row["table_name"] for row in rows}


# ------------------------------------------------------------- real Postgres


@pytest.mark.postgres
async def test_migrating_twice_is_idempotent_and_the_server_then_only_verifies(
    fresh_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Production: both URIs come from one secret, so our tables go to `deerflow`.
    env = _env(DEERFLOW_POSTGRES_URI=fresh_uri, DATABASE_URI=fresh_uri)
    check = await _arun("--check", env=env)
    assert check.returncode == EXIT_BEHIND, check.stderr
    assert "behind" in check.stdout and "checkpoint_migrations at v-1" in check.stdout

    first = await _arun(env=env)
    assert first.returncode == 0, first.stderr
    tables = await _tables(fresh_uri, OWN_SCHEMA)
    second = await _arun(env=env)
    assert second.returncode == 0, second.stderr
    assert first.stdout == second.stdout  # same versions: the second run changed nothing
    assert await _tables(fresh_uri, OWN_SCHEMA) == tables
    assert first.stdout.count("\n") == 1 and first.stderr == ""
    assert f"schema {OWN_SCHEMA}" in first.stdout
    assert {"checkpoints", "checkpoint_migrations", "store", "store_migrations"} <= tables
    assert not {"checkpoints", "store"} & await _tables(fresh_uri, "public")
    assert (await _arun("--check", env=env)).returncode == 0

    # Server processes that only verify start on the migrated tables and work.
    monkeypatch.setenv("DEERFLOW_POSTGRES_URI", fresh_uri)
    monkeypatch.setenv("DATABASE_URI", fresh_uri)
    monkeypatch.setenv("DEERFLOW_POSTGRES_SETUP", "verify")
    reset_settings_cache()
    try:
        config: RunnableConfig = {
            "configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}
        }
        async with make_checkpointer() as saver:
            saved = await saver.aput(config, empty_checkpoint(), {"step": 0}, {})
            assert await saver.aget_tuple(saved) is not None
        async with make_store() as store:
            await store.aput(("users", "u1", "memory"), "fact", {"text": "likes tea"})
            item = await store.aget(("users", "u1", "memory"), "fact")
            assert item is not None and item.value == {"text": "likes tea"}
    finally:
        reset_settings_cache()


@pytest.mark.postgres
async def test_verify_refuses_to_start_on_tables_the_job_did_not_migrate(fresh_uri: str) -> None:
    db = DatabaseConfig.model_validate({"uri": fresh_uri, "schema": "fresh", "setup": "verify"})
    calls: list[str] = []

    async def setup() -> None:
        calls.append("setup")

    required = DeerflowPostgresSaver.required_migrations()
    async with shared_pool(db) as (_, entry):
        with pytest.raises(SchemaNotMigratedError, match=r"does not exist.*runtime\.migrate"):
            await run_setup(entry, "checkpointer", db, setup, required)
    assert calls == []  # verify never runs DDL

    # Migrated by the job (here: a process with setup=migrate), then behind by
    # one version: the message names the table and both versions.
    migrating = db.model_copy(update={"setup": "migrate"})
    async with shared_pool(migrating) as (pool, entry):
        await run_setup(entry, "checkpointer", migrating, DeerflowPostgresSaver(pool).setup, {})
    async with shared_pool(db) as (_, entry):
        await run_setup(entry, "checkpointer", db, setup, required)
    ahead = {
        **required,
        "deerflow_checkpoint_migrations": required["deerflow_checkpoint_migrations"] + 1,
    }
    async with shared_pool(db) as (_, entry):
        with pytest.raises(SchemaNotMigratedError) as info:
            await run_setup(entry, "checkpointer", db, setup, ahead)
    last = required["deerflow_checkpoint_migrations"]
    assert f"deerflow_checkpoint_migrations at v{last}, needs v{last + 1}" in str(info.value)
    assert calls == []


# ------------------------------------------------------------- failure paths


def test_an_unreachable_database_fails_with_one_line_and_no_password() -> None:
    uri = f"postgresql://app:{SECRET}@127.0.0.1:1/deer?connect_timeout=2"
    result = _run(env=_env(DEERFLOW_POSTGRES_URI=uri, DATABASE_URI=uri))
    assert result.returncode == EXIT_DATABASE
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot connect to Postgres at app@127.0.0.1:1/deer" in lines[0]
    assert SECRET not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (f"mysql://app:{SECRET}@db/deer", "must be a postgresql://"),
        # libpq quotes this URI, password included, in its own parse error.
        (f"postgresql://app:{SECRET}@[db/deer", "not a valid Postgres URI"),
        (f"postgresql://app:{SECRET}@db/deer?nosuchparam=1", "not a valid Postgres URI"),
    ],
)
def test_a_bad_uri_is_a_config_error_without_the_password(uri: str, expected: str) -> None:
    result = _run(env=_env(DEERFLOW_POSTGRES_URI=uri))
    assert result.returncode == EXIT_CONFIG
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert SECRET not in result.stderr + result.stdout


def test_without_a_database_there_is_nothing_to_migrate() -> None:
    result = _run(env=_env())
    assert result.returncode == EXIT_CONFIG
    assert "DEERFLOW_POSTGRES_URI" in result.stderr and len(result.stderr.splitlines()) == 1


def test_setup_accepts_the_old_booleans() -> None:
    assert DatabaseConfig.model_validate({"setup": True}).setup == "migrate"
    assert DatabaseConfig.model_validate({"setup": False}).setup == "off"
    assert DatabaseConfig.model_validate({"setup": "Verify"}).setup == "verify"
    with pytest.raises(ValueError, match="setup"):
        DatabaseConfig.model_validate({"setup": "sometimes"})
