"""The provider contract suite, run against the local provider."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandbox.local import LocalSandboxProvider
from tests.sandbox.contract import SandboxContract


class TestLocalSandboxContract(SandboxContract):
    # The local provider keeps 64 KiB of a huge output; hold it to that.
    max_capped_output_bytes = 256 * 1024

    @pytest.fixture
    async def sandbox_provider(self, tmp_path: Path) -> AsyncIterator[LocalSandboxProvider]:
        skills = tmp_path / "skills"
        await asyncio.to_thread(skills.mkdir)
        provider = LocalSandboxProvider(
            tmp_path / "data", skills_dir=skills, max_output_bytes=64 * 1024, search_timeout=1
        )
        yield provider
        await provider.reset()
