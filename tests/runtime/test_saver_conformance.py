"""LangGraph's own checkpoint conformance suite (``langgraph-checkpoint-conformance``)
against ``DeerflowPostgresSaver`` on the real Postgres, every capability included:
the base ones and the extended delete-for-runs, copy and prune.

Each capability runs on a fresh saver over a fresh database, as the suite asks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, Capability
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from runtime.saver import DeerflowPostgresSaver
from tests.support.postgres import fresh_database, postgres_available

pytestmark = pytest.mark.postgres


@checkpointer_test(name="DeerflowPostgresSaver")
async def deerflow_saver() -> AsyncIterator[DeerflowPostgresSaver]:
    with fresh_database("deerflow_conformance") as uri:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            uri,
            kwargs={"autocommit": True, "prepare_threshold": None, "row_factory": dict_row},
            min_size=1,
            max_size=4,
            open=False,
        )
        await pool.open(wait=True)
        try:
            saver = DeerflowPostgresSaver(pool)
            await saver.setup()
            yield saver
        finally:
            await pool.close()


@pytest.mark.parametrize("capability", sorted(c.value for c in ALL_CAPABILITIES))
async def test_conformance(capability: str, postgres_uri: str) -> None:
    del postgres_uri  # only for its skip/fail policy when Postgres is down
    assert postgres_available() is None
    report = await validate(deerflow_saver, capabilities={capability})
    result = report.results[capability]
    assert result.detected, f"{capability} is not implemented by the saver"
    failures = "\n".join(str(f) for f in result.failures)
    assert result.passed, f"{result.tests_failed} conformance test(s) failed:\n{failures}"
    assert result.tests_passed > 0


def test_every_capability_is_covered() -> None:
    """A new capability in a later suite version shows up here, not silently skipped."""
    assert {c.value for c in Capability} == {c.value for c in ALL_CAPABILITIES}
