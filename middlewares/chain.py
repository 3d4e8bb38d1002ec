"""Assembly of the middleware chain, in the spec's order (000, "Assembly order").

The order is a runtime contract: ``before_*`` hooks run in list order,
``after_*`` in reverse, and ``wrap_*`` hooks nest with the first entry
outermost. Entries whose middleware does not exist yet are absent; the order of
those that exist is already the spec's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from middlewares.subagent_limit import SubagentLimitMiddleware
from runtime.config import ModelConfig, Settings
from runtime.run_options import RunOptions
from subagents.limits import resolve_subagent_limits

__all__ = [
    "ChainInputs",
    "build_lead_runtime_middlewares",
    "build_middlewares",
    "build_subagent_runtime_middlewares",
]


@dataclass(frozen=True)
class ChainInputs:
    """What assembly may depend on: config, the run's switches and its model."""

    settings: Settings
    options: RunOptions
    model: ModelConfig
    effective: dict[str, Any] = field(default_factory=dict)


def build_lead_runtime_middlewares(inputs: ChainInputs) -> list[AgentMiddleware[Any, Any]]:
    """The shared runtime base (spec numbers 1-16)."""
    return []


def build_subagent_runtime_middlewares(inputs: ChainInputs) -> list[AgentMiddleware[Any, Any]]:
    """The subagent chain: most of the runtime base plus its own tail."""
    return []


def build_middlewares(
    inputs: ChainInputs,
    *,
    custom_middlewares: Sequence[AgentMiddleware[Any, Any]] = (),
) -> list[AgentMiddleware[Any, Any]]:
    """The lead chain: base, lead-only segment, custom, extensions, then the tail."""
    chain = build_lead_runtime_middlewares(inputs)
    # 31. SubagentLimitMiddleware, when subagents are enabled for the run.
    if inputs.effective.get("subagent_enabled"):
        limits = resolve_subagent_limits(inputs.settings.subagents, inputs.options)
        chain.append(SubagentLimitMiddleware(limits))
    chain.extend(custom_middlewares)
    return chain
