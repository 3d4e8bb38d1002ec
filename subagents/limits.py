"""The numeric limits of delegation, resolved once per agent build and clamped.

Why clamp instead of reject: a run's override comes from the caller, and a
limit that is out of range must never fail the run; it is brought into range.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.config import SubagentsConfig
from runtime.run_options import RunOptions

__all__ = [
    "CONCURRENCY_CEILING",
    "TOTAL_PER_RUN_RANGE",
    "SubagentLimits",
    "clamp",
    "resolve_subagent_limits",
]

CONCURRENCY_CEILING = 64
TOTAL_PER_RUN_RANGE = (1, 50)


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


@dataclass(frozen=True)
class SubagentLimits:
    """``max_concurrent``: subagents of one run executing at once (others queue);
    ``max_per_response``: ``task`` calls one model response may dispatch;
    ``max_total_per_run``: ``task`` calls one run may dispatch in all."""

    max_concurrent: int
    max_per_response: int
    max_total_per_run: int


def resolve_subagent_limits(config: SubagentsConfig, options: RunOptions) -> SubagentLimits:
    """Config defaults, the run's overrides, then the clamps.

    ``max_concurrent_subagents`` (run override or config) is clamped to
    ``1..max_running`` and ``max_running`` to ``1..64``;
    ``max_total_subagents`` (run override) or ``max_total_per_run`` to ``1..50``.
    """
    ceiling = clamp(config.max_running, 1, CONCURRENCY_CEILING)
    concurrent = options.max_concurrent_subagents
    if concurrent is None:
        concurrent = config.max_concurrent_subagents
    total = options.max_total_subagents
    if total is None:
        total = config.max_total_per_run
    return SubagentLimits(
        max_concurrent=clamp(concurrent, 1, ceiling),
        max_per_response=clamp(config.max_tasks_per_response, 1, CONCURRENCY_CEILING),
        max_total_per_run=clamp(total, *TOTAL_PER_RUN_RANGE),
    )
