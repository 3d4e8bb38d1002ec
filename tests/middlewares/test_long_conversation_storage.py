"""A compacted thread's checkpoint storage on the real Postgres saver grows linearly in turns."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from runtime.saver import DeerflowPostgresSaver
from tests.support.delegation import run_lead
from tests.support.long_conversation import long_config, thread_storage_bytes

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pool(postgres_uri: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        postgres_uri,
        kwargs={"autocommit": True, "prepare_threshold": None, "row_factory": dict_row},
        min_size=1,
        max_size=2,
        open=False,
    )
    await pool.open(wait=True)
    await DeerflowPostgresSaver(pool).setup()
    yield pool
    await pool.close()


async def test_storage_of_a_long_compacted_thread_is_linear(
    tmp_path: Path, pool: AsyncConnectionPool[Any]
) -> None:
    path = long_config(tmp_path, key=f"pg-{uuid.uuid4().hex}", steps=50)
    saver = DeerflowPostgresSaver(pool)
    thread_id = str(uuid.uuid4())
    sizes = []
    for run in range(6):  # 300 model turns
        result = await run_lead(
            path,
            f"request {run}",
            thread_id=thread_id,
            checkpointer=saver,  # type: ignore[arg-type]
            recursion_limit=2000,
        )
        assert result.values["messages"][-1].text == "All steps done."
        sizes.append(await thread_storage_bytes(pool, thread_id))
    growth = [later - earlier for earlier, later in itertools.pairwise(sizes)]
    # Quadratic storage would make each run's growth larger than the last.
    assert max(growth[1:]) <= 1.5 * min(growth[1:]), growth
