"""The ``lead_agent`` graph: a factory the server calls with each run's config."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from deerflow_extension_api.host import aload_extensions
from graphs._build import build_agent
from graphs.prompts import LEAD_SYSTEM_PROMPT
from graphs.subagent import build_subagent
from runtime.config import Settings, aget_settings
from runtime.skills import aget_skill_registry
from tools.mcp import discover_mcp_tools
from tools.selection import reserved_tool_names

__all__ = ["build_lead_agent", "make_lead_agent"]


def build_lead_agent(
    settings: Settings, config: RunnableConfig | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Synchronous builder (no I/O), for tests and embedding."""
    return build_agent(
        settings,
        config,
        kind="lead_agent",
        system_prompt=LEAD_SYSTEM_PROMPT,
        # The composition root wires the subagent builder into the task tool.
        build_subagent=build_subagent,
    )


async def make_lead_agent(config: RunnableConfig) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Registered in ``langgraph.json``; settings load off the event loop once."""
    settings = await aget_settings()
    await aload_extensions(settings)  # plugin imports and install() run off the event loop
    await aget_skill_registry(settings)  # skills are read once, off the event loop
    await discover_mcp_tools(settings, reserved_tool_names(settings))
    return build_lead_agent(settings, config)
