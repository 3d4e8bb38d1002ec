"""The ``subagent`` graph: the general-purpose subagent, runnable on its own."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from deerflow_extension_api._plugins import aload_extensions
from graphs._build import build_agent
from graphs.prompts import SUBAGENT_SYSTEM_PROMPT
from runtime.config import Settings, aget_settings

__all__ = ["build_subagent", "make_subagent"]


def build_subagent(
    settings: Settings, config: RunnableConfig | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Synchronous builder (no I/O), for tests and in-process delegation."""
    return build_agent(settings, config, kind="subagent", system_prompt=SUBAGENT_SYSTEM_PROMPT)


async def make_subagent(config: RunnableConfig) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Registered in ``langgraph.json``."""
    settings = await aget_settings()
    await aload_extensions(settings)  # plugin imports and install() run off the event loop
    return build_subagent(settings, config)
