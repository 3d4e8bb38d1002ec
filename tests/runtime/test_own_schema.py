"""Our checkpointer/store tables never share ``public`` with the LangGraph Server's (issue 20 item 3)."""

from __future__ import annotations

import pytest

from runtime.config import OWN_SCHEMA, ConfigError, load_settings, same_database

SERVER = "postgresql://app:secret@db.internal:5432/langgraph"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DEERFLOW_POSTGRES_SCHEMA", "DEERFLOW_POSTGRES_URI", "DATABASE_URI"):
        monkeypatch.delenv(name, raising=False)


def test_same_database_compares_host_port_and_name() -> None:
    assert same_database(SERVER, "postgresql://other:pw@db.internal/langgraph?sslmode=require")
    assert same_database(SERVER, "host=db.internal port=5432 dbname=langgraph user=x")
    assert not same_database(SERVER, "postgresql://app:secret@db.internal:5432/deerflow")
    assert not same_database(SERVER, "postgresql://app:secret@db2.internal:5432/langgraph")
    assert not same_database(SERVER, ":memory:")  # what `langgraph dev` sets
    assert not same_database(None, SERVER)


def test_our_schema_defaults_away_from_public_when_the_uris_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Production: both variables come from one secret.
    monkeypatch.setenv("DATABASE_URI", SERVER)
    monkeypatch.setenv("DEERFLOW_POSTGRES_URI", SERVER)
    settings = load_settings()
    assert settings.database.schema_name == OWN_SCHEMA != "public"
    # An explicit other schema is kept; `public` there is refused.
    monkeypatch.setenv("DEERFLOW_POSTGRES_SCHEMA", "agents")
    assert load_settings().database.schema_name == "agents"
    monkeypatch.setenv("DEERFLOW_POSTGRES_SCHEMA", "public")
    with pytest.raises(ConfigError, match="collide"):
        load_settings()


def test_a_separate_database_keeps_the_configured_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URI", SERVER)
    monkeypatch.setenv("DEERFLOW_POSTGRES_URI", "postgresql://app:secret@db.internal/deerflow")
    assert load_settings().database.schema_name is None
