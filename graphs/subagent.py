"""The ``subagent`` graph: one subagent type, runnable on its own or by delegation.

The type comes from ``subagent_type`` in the run's context (or configurable),
default ``general-purpose``; an unknown type fails the build with a clear error.
The type fixes the system prompt, tools and (unless ``inherit``) the model, and
its ``max_turns`` becomes the graph's default recursion limit, so a subagent is
capped the same way whether the ``task`` tool runs it in-process, the server
runs it for a remote ``task``, or a user starts it from the SDK or Studio.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from graphs._build import build_agent
from runtime.config import ConfigError, Settings, aget_settings
from runtime.run_options import merged_run_config
from subagents.types import (
    DEFAULT_SUBAGENT_TYPE,
    SubagentType,
    resolve_type_tools,
    subagent_types,
)

__all__ = ["build_subagent", "make_subagent", "recursion_limit_for", "subagent_type_of"]


def subagent_type_of(settings: Settings, config: RunnableConfig | None) -> SubagentType:
    requested = merged_run_config(config).get("subagent_type") or DEFAULT_SUBAGENT_TYPE
    types = subagent_types(settings)
    if not isinstance(requested, str) or requested not in types:
        raise ConfigError(
            f"unknown subagent_type {requested!r}; available: {', '.join(sorted(types))}"
        )
    return types[requested]


def _with_model(config: RunnableConfig | None, model_name: str) -> RunnableConfig:
    """``config`` with the run's model switched to ``model_name``."""
    result: dict[str, Any] = dict(config or {})
    result["configurable"] = {**(result.get("configurable") or {}), "model_name": model_name}
    context = result.get("context")
    if isinstance(context, dict):
        result["context"] = {**context, "model_name": model_name}
    return result  # type: ignore[return-value]


def recursion_limit_for(graph: Any, max_turns: int) -> int:
    """Supersteps enough for ``max_turns`` model turns through every node of ``graph``.

    A turn passes each node at most once, so this is an upper bound that grows
    with the middleware chain instead of a fixed guess.
    """
    compiled = getattr(graph, "bound", graph)
    nodes = [name for name in getattr(compiled, "nodes", {}) if not name.startswith("__")]
    return max_turns * max(2, len(nodes))


def build_subagent(
    settings: Settings, config: RunnableConfig | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Synchronous builder (no I/O), for tests and in-process delegation."""
    subagent_type = subagent_type_of(settings, config)
    if subagent_type.model != "inherit":
        config = _with_model(config, subagent_type.model)
    graph = build_agent(
        settings,
        config,
        kind="subagent",
        system_prompt=subagent_type.system_prompt,
        tools=resolve_type_tools(settings, subagent_type),
    )
    max_turns = subagent_type.max_turns or settings.subagents.max_turns
    bound = graph.with_config(
        {
            "recursion_limit": recursion_limit_for(graph, max_turns),
            "metadata": {"subagent_type": subagent_type.name},
        }
    )
    return bound  # type: ignore[return-value]


async def make_subagent(config: RunnableConfig) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Registered in ``langgraph.json``."""
    return build_subagent(await aget_settings(), config)
