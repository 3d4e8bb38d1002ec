"""Resolution and clamping of the delegation limits."""

from __future__ import annotations

from typing import Any

from runtime.config import SubagentsConfig
from runtime.run_options import RunOptions, resolve_run_options
from subagents.limits import resolve_subagent_limits


def test_defaults() -> None:
    limits = resolve_subagent_limits(SubagentsConfig(), RunOptions())
    assert (limits.max_concurrent, limits.max_per_response, limits.max_total_per_run) == (3, 6, 6)


def test_run_overrides_are_clamped() -> None:
    config = SubagentsConfig(max_running=4)
    assert (
        resolve_subagent_limits(config, RunOptions(max_concurrent_subagents=10)).max_concurrent == 4
    )
    assert (
        resolve_subagent_limits(config, RunOptions(max_concurrent_subagents=-3)).max_concurrent == 1
    )
    assert (
        resolve_subagent_limits(config, RunOptions(max_total_subagents=500)).max_total_per_run == 50
    )
    assert resolve_subagent_limits(config, RunOptions(max_total_subagents=0)).max_total_per_run == 1


def test_config_values_are_clamped_too() -> None:
    config = SubagentsConfig(
        max_running=1000,
        max_concurrent_subagents=100,
        max_tasks_per_response=0,
        max_total_per_run=99,
    )
    limits = resolve_subagent_limits(config, RunOptions())
    assert (limits.max_concurrent, limits.max_per_response, limits.max_total_per_run) == (64, 1, 50)


def test_run_options_parse_integers_and_ignore_junk() -> None:
    config: Any = {
        "configurable": {"max_concurrent_subagents": "2"},
        "context": {"max_total_subagents": 4.0},
    }
    options = resolve_run_options(config)
    assert (options.max_concurrent_subagents, options.max_total_subagents) == (2, 4)
    junk = resolve_run_options(
        {"configurable": {"max_concurrent_subagents": "lots", "max_total_subagents": True}}  # type: ignore[typeddict-item]
    )
    assert (junk.max_concurrent_subagents, junk.max_total_subagents) == (None, None)
