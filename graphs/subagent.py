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

from deerflow_extension_api.host import aload_extensions
from graphs._build import build_agent
from runtime.config import ConfigError, Settings, aget_settings
from runtime.run_options import merged_run_config
from runtime.skills import aget_skill_registry
from subagents.types import DEFAULT_SUBAGENT_TYPE, SubagentType, subagent_types
from tools.mcp import discover_mcp_tools
from tools.selection import reserved_tool_names

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
    """The recursion limit that admits exactly ``max_turns`` model turns.

    A turn is one pass through the per-turn nodes (the model, the tools and any
    ``before_model``/``after_model`` hook nodes); ``before_agent`` nodes run once
    before the first turn and ``after_agent`` nodes once after the last. A final
    turn without tool calls skips the tools node, which leaves the step that one
    ``after_agent`` node needs; any further ``after_agent`` nodes get their own.
    """
    compiled = getattr(graph, "bound", graph)
    nodes = [name for name in getattr(compiled, "nodes", {}) if not name.startswith("__")]
    once_before = sum(1 for name in nodes if name.endswith(".before_agent"))
    once_after = sum(1 for name in nodes if name.endswith(".after_agent"))
    per_turn = max(2, len(nodes) - once_before - once_after)
    return once_before + per_turn * max(1, max_turns) + max(0, once_after - 1)


def build_subagent(
    settings: Settings, config: RunnableConfig | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Synchronous builder (no I/O), for tests and in-process delegation."""
    subagent_type = subagent_type_of(settings, config)
    if subagent_type.model != "inherit":
        config = _with_model(config, subagent_type.model)
    # The type's tools go through tools.selection like the lead's: after the
    # model is resolved, so the vision gate sees the model the subagent runs.
    graph = build_agent(
        settings,
        config,
        kind="subagent",
        system_prompt=subagent_type.system_prompt,
        subagent_type=subagent_type,
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
    settings = await aget_settings()
    await aload_extensions(settings)  # plugin imports and install() run off the event loop
    await aget_skill_registry(settings)  # skills are read once, off the event loop
    await discover_mcp_tools(settings, reserved_tool_names(settings))
    return build_subagent(settings, config)
