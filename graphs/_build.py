"""Shared agent construction for the lead agent and subagent factories."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph.state import CompiledStateGraph

from middlewares._fusion import compose_chain
from middlewares.chain import (
    ChainInputs,
    build_middlewares,
    build_subagent_runtime_middlewares,
)
from middlewares.model_warning import ModelWarningMiddleware
from runtime.config import Settings
from runtime.models import create_chat_model, resolve_model_name
from runtime.run_options import context_schema_for, resolve_run_options
from runtime.state import ThreadState
from subagents.limits import resolve_subagent_limits
from tools.selection import select_tools
from tools.task import make_task_tool

__all__ = ["build_agent"]


def build_agent(
    settings: Settings,
    config: RunnableConfig | None,
    *,
    kind: Literal["lead_agent", "subagent"],
    system_prompt: str,
    tools: Sequence[BaseTool] | None = None,
    custom_middlewares: Sequence[AgentMiddleware[Any, Any]] = (),
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build the agent for one run and stamp what it resolved into run metadata."""
    options = resolve_run_options(config)
    resolved = resolve_model_name(settings, options.model_name)
    effective = options.effective(subagents_default=settings.subagents.enabled)
    # subagents.enabled is the master switch, and a subagent never delegates further.
    effective["subagent_enabled"] = (
        kind == "lead_agent" and settings.subagents.enabled and bool(effective["subagent_enabled"])
    )
    thinking = bool(effective["thinking_enabled"]) and resolved.entry.supports_thinking
    model = create_chat_model(resolved.entry, thinking_enabled=thinking)
    inputs = ChainInputs(
        settings=settings, options=options, model=resolved.entry, effective=effective
    )
    if kind == "lead_agent":
        middleware = build_middlewares(inputs, custom_middlewares=custom_middlewares)
    else:
        middleware = build_subagent_runtime_middlewares(
            inputs, custom_middlewares=custom_middlewares
        )
    if resolved.warning:
        # Not a chain slot: present only for a run whose model_name was unknown.
        middleware = [*middleware, ModelWarningMiddleware(warning=resolved.warning)]
    agent_tools = (
        list(tools)
        if tools is not None
        else select_tools(settings, kind=kind, model=resolved.entry)
    )
    if effective["subagent_enabled"]:
        limits = resolve_subagent_limits(settings.subagents, options)
        agent_tools.append(make_task_tool(settings, limits=limits, parent_model=resolved.name))
    graph = create_agent(
        model,
        agent_tools,
        system_prompt=system_prompt,
        middleware=compose_chain(
            middleware, state_schema=ThreadState, config=config, tools=agent_tools
        ),
        state_schema=ThreadState,
        context_schema=context_schema_for(kind),
        name=kind,
    )
    metadata: dict[str, Any] = {
        "agent_name": options.agent_name or kind,
        "model_name": resolved.name,
        **effective,
        "thinking_enabled": thinking,
    }
    if resolved.warning:
        metadata["model_warning"] = resolved.warning
    if config is not None:
        # LangGraph Server runs the graph with the very config it passed to the
        # factory, and that config's metadata wins over the graph's own. Writing
        # the effective values into it makes them (not the caller's raw request,
        # e.g. an unknown ``model_name``) what the run's metadata records.
        run_metadata = config.get("metadata")
        if isinstance(run_metadata, dict):
            run_metadata.update(metadata)
    return graph.with_config({"metadata": metadata})
