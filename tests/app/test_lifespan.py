"""The HTTP app's lifespan starts and stops the sandbox provider with the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.server import app, lifespan
from runtime.config import reset_settings_cache
from sandbox.local import LocalSandboxProvider
from sandbox.provider import reset_sandbox_providers
from tests.support.scripted import ai_text, write_config

EVENTS: list[str] = []


class RecordingProvider(LocalSandboxProvider):
    """The local provider, with the start/aclose hooks a remote provider has."""

    async def start(self) -> None:
        EVENTS.append("start")

    async def aclose(self) -> None:
        EVENTS.append("aclose")


class FailingProvider(RecordingProvider):
    async def start(self) -> None:
        EVENTS.append("start")
        raise ConnectionError("cluster unreachable")


@pytest.fixture
def provider_config(tmp_path: Path, use_config: Any) -> Any:
    def apply(cls: type) -> None:
        use_config(
            write_config(tmp_path, [ai_text("x")], sandbox={"use": f"{__name__}:{cls.__name__}"})
        )
        reset_sandbox_providers()
        EVENTS.clear()

    yield apply
    reset_sandbox_providers()
    reset_settings_cache()


async def test_provider_starts_and_stops_with_the_app(provider_config: Any) -> None:
    provider_config(RecordingProvider)
    async with lifespan(app):
        assert EVENTS == ["start"]
    assert EVENTS == ["start", "aclose"]


async def test_a_failing_start_does_not_stop_the_server(provider_config: Any) -> None:
    provider_config(FailingProvider)
    async with lifespan(app):
        assert EVENTS == ["start"]
    assert EVENTS == ["start", "aclose"]
