"""Shared agent construction for the lead agent and subagent factories."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph.state import CompiledStateGraph

from authz.principal import build_principal_from_context
from authz.setup import authorize_model
from graphs.prompts import skills_prompt_section
from middlewares import compose_chain, lazy_chain_spans
from middlewares.chain import (
    ChainInputs,
    build_middlewares,
    build_subagent_runtime_middlewares,
    subagent_type_of,
)
from middlewares.model_warning import ModelWarningMiddleware
from runtime.config import Settings
from runtime.models import create_chat_model, resolve_model_name
from runtime.run_options import context_schema_for, resolve_run_options
from runtime.skills import get_skill_registry, run_skill_allowlist
from runtime.state import ThreadState
from subagents.executor import SubagentBuilder
from subagents.limits import resolve_subagent_limits
from subagents.types import SubagentType
from tools.clarification import for_clarification_mode
from tools.selection import select_tools
from tools.task import make_task_tool
from tools.tool_search import make_tool_search

__all__ = ["build_agent"]


def _skills_section(settings: Settings, options: Any, *, kind: str) -> str:
    """The enabled skills this agent may use, for its system prompt (none if loading failed)."""
    if not settings.skills.enabled:
        return ""
    try:
        registry = get_skill_registry(settings)
    except Exception:  # the chain's factories log it; the agent runs without skills
        return ""
    allowlist = run_skill_allowlist(settings, options, subagent=kind == "subagent")
    return skills_prompt_section(registry.visible(allowlist))


def build_agent(
    settings: Settings,
    config: RunnableConfig | None,
    *,
    kind: Literal["lead_agent", "subagent"],
    system_prompt: str,
    tools: Sequence[BaseTool] | None = None,
    subagent_type: SubagentType | None = None,
    custom_middlewares: Sequence[AgentMiddleware[Any, Any]] = (),
    build_subagent: SubagentBuilder | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build the agent for one run and stamp what it resolved into run metadata.

    ``build_subagent`` is how the lead agent's ``task`` tool builds in-process
    subagents (the composition root passes ``graphs.subagent.build_subagent``).
    The tools come from ``tools.selection.select_tools`` for ``kind`` (and a
    subagent's ``subagent_type``) on the resolved model; ``tools`` replaces
    that selection outright (tests).
    """
    options = resolve_run_options(config)
    resolved = resolve_model_name(settings, options.model_name)
    # Model authorization (spec: model:use) before anything is built for the run.
    authorized = authorize_model(
        settings,
        build_principal_from_context(config or {}, internal=kind == "subagent"),
        resolved.entry,
    )
    if authorized.entry is not resolved.entry:
        resolved = dataclasses.replace(resolved, entry=authorized.entry)
    effective = options.effective(subagents_default=settings.subagents.enabled)
    # subagents.enabled is the master switch, and a subagent never delegates further.
    effective["subagent_enabled"] = (
        kind == "lead_agent" and settings.subagents.enabled and bool(effective["subagent_enabled"])
    )
    thinking = bool(effective["thinking_enabled"]) and resolved.entry.supports_thinking
    model = create_chat_model(
        resolved.entry,
        thinking_enabled=thinking,
        # LLMErrorHandling retries (Retry-After, circuit breaker): not the SDK too.
        sdk_retries=not settings.llm_error_handling.enabled,
    )
    agent_tools = (
        list(tools)
        if tools is not None
        else select_tools(settings, kind=kind, model=resolved.entry, subagent_type=subagent_type)
    )
    agent_tools = [for_clarification_mode(t, settings.clarification.mode) for t in agent_tools]
    # Deferred tools (27-29): the lead and subagents alike get tool_search over
    # their own deferred tools, and McpRouting routes among those same tools.
    deferred = tuple(t for t in agent_tools if (t.metadata or {}).get("deferred"))
    if settings.tool_search.enabled and deferred:
        agent_tools.append(make_tool_search(deferred, max_results=settings.tool_search.max_results))
    inputs = ChainInputs(
        settings=settings,
        options=options,
        model=resolved.entry,
        effective=effective,
        subagent_type=subagent_type_of(config) if kind == "subagent" else None,
        deferred_tools=deferred,
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
    if effective["subagent_enabled"]:
        limits = resolve_subagent_limits(settings.subagents, options)
        agent_tools.append(
            make_task_tool(
                settings,
                limits=limits,
                parent_model=resolved.name,
                build_subagent=build_subagent,
            )
        )
    system_prompt = system_prompt + _skills_section(settings, options, kind=kind)
    with lazy_chain_spans():
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
    if authorized.fallback_reason:
        metadata["model_authorization"] = {
            "requested": authorized.requested,
            "model_name": authorized.entry.name,
            "reason": authorized.fallback_reason,
        }
    if config is not None:
        # LangGraph Server runs the graph with the very config it passed to the
        # factory, and that config's metadata wins over the graph's own. Writing
        # the effective values into it makes them (not the caller's raw request,
        # e.g. an unknown ``model_name``) what the run's metadata records.
        run_metadata = config.get("metadata")
        if isinstance(run_metadata, dict):
            run_metadata.update(metadata)
    return graph.with_config({"metadata": metadata})
