"""The ``scenario`` fixture: a served config with recording models and a fresh thread."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.scenarios import Scenario, new_key, scenario_config

MakeScenario = Callable[..., Awaitable[Scenario]]


@pytest.fixture(params=["default", "all_optional"])
def chain_profile(request: pytest.FixtureRequest) -> str:
    """Run a scenario with the default chain and with every optional middleware on."""
    return str(request.param)


@pytest.fixture
def scenario(
    tmp_path: Path,
    use_config: Callable[[Path], Path],
    lg_client: Callable[..., Any],
    lg_server: Any,
) -> MakeScenario:
    """``await scenario(script, worker=..., all_optional=..., **sections)``."""
    counter = iter(range(1000))

    async def make(
        script: list[dict[str, Any]],
        *,
        worker: list[dict[str, Any]] | None = None,
        all_optional: bool = False,
        graph: str = "lead_agent",
        **sections: Any,
    ) -> Scenario:
        key = new_key("scenario")
        directory = tmp_path / f"s{next(counter)}"

        def write() -> Path:  # off the event loop (the server's blocking-call detector)
            directory.mkdir()
            return scenario_config(
                directory, script, key=key, worker=worker, all_optional=all_optional, **sections
            )

        use_config(await asyncio.to_thread(write))
        return await Scenario.start(lg_client(), key, graph=graph, app=lg_server)

    return make
