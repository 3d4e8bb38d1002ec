"""``ChainInputs.setting()`` is typed: a misspelled section or key is an error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from middlewares import chain as chain_module
from middlewares.chain import PENDING_SECTIONS, ChainInputs
from runtime.config import ConfigError, Settings
from tests.support.chain_fixtures import inputs_for


@pytest.fixture
async def inputs(tmp_path: Path) -> ChainInputs:
    return await asyncio.to_thread(inputs_for, tmp_path, configurable={"thread_id": "t"})


async def test_a_declared_key_reads_the_settings(inputs: ChainInputs) -> None:
    expected = inputs.settings.llm_error_handling.max_retries
    assert inputs.setting("llm_error_handling", "max_retries", 99) == expected


async def test_a_misspelled_section_is_an_error_not_a_default(inputs: ChainInputs) -> None:
    with pytest.raises(ConfigError, match="llm_eror_handling"):
        inputs.setting("llm_eror_handling", "enabled", True)


async def test_a_misspelled_key_is_an_error(inputs: ChainInputs) -> None:
    with pytest.raises(ConfigError, match="enabeld"):
        inputs.setting("llm_error_handling", "enabeld", True)


async def test_a_pending_section_reads_its_default(
    inputs: ChainInputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every section the chain names has landed; a future one reads its default.
    monkeypatch.setattr(chain_module, "PENDING_SECTIONS", frozenset({"future_section"}))
    assert inputs.setting("future_section", "enabled", "the default") == "the default"


def test_pending_sections_are_not_declared_settings() -> None:
    """When a pending section lands in Settings, it must leave the pending list."""
    assert not PENDING_SECTIONS & set(Settings.model_fields)


def test_a_slot_condition_on_a_misspelled_section_fails_at_definition() -> None:
    with pytest.raises(ConfigError, match="loop_detecton"):
        chain_module._enabled("loop_detecton", True)
