"""Which tools an agent gets: the one place that decides, for the lead and subagents.

What is *selected* depends on the agent kind: the lead agent gets the groups
``tool_groups.lead_agent`` picks; a subagent gets its type's tools
(``subagents.types``: the general-purpose set or the type's ``tools:`` list)
and the MCP tools when both the type (general-purpose, or ``group:mcp``) and
``tool_groups.subagent`` (the ``mcp`` group) allow them.

Then the capability gates apply to every configured tool, whatever the groups or
a type's list say, because offering a tool that cannot work only wastes the
model's turns: ``vision`` needs a model entry with ``supports_vision``,
``sandbox`` (shell commands) needs a provider that allows commands
(``sandbox.allow_host_bash`` on the local provider), the built-in
``web_search`` needs its provider's key, and the ``memory`` group is offered
only to the lead agent with ``memory.mode: tool`` (subagent runs never write
memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from langchain_core.tools import BaseTool

# The default provider and tool modules are imported here, when the graph
# modules are registered at server start, rather than inside the first run.
import sandbox.local  # noqa: F401
import tools.files
import tools.memory
import tools.present
import tools.sandbox
import tools.view_image
import tools.web  # noqa: F401
from runtime.config import ModelConfig, Settings, ToolConfig
from sandbox.provider import get_sandbox_provider
from subagents.types import (
    DEFAULT_SUBAGENT_TYPE,
    SubagentType,
    ToolCatalog,
    resolve_type_tools,
    subagent_types,
    type_takes_mcp_tools,
)
from tools.mcp import get_mcp_manager
from tools.registry import load_tools, tool_configs
from tools.web import search_available

__all__ = [
    "COMMAND_GROUP",
    "MCP_GROUP",
    "MEMORY_GROUP",
    "TOOL_CATALOG",
    "VISION_GROUP",
    "capability_gate",
    "deferred_catalog",
    "reserved_tool_names",
    "select_tools",
]

VISION_GROUP = "vision"
COMMAND_GROUP = "sandbox"
MEMORY_GROUP = "memory"
MCP_GROUP = "mcp"


TOOL_CATALOG = ToolCatalog(load_tools=load_tools, tool_configs=tool_configs)
"""The configured tools, for choosing each subagent type's tools (``subagents.types``)."""

AgentKind = Literal["lead_agent", "subagent"]


def capability_gate(
    settings: Settings, *, kind: AgentKind, model: ModelConfig | None
) -> Callable[[ToolConfig], bool]:
    """Whether a configured tool can work for an agent of ``kind`` on ``model``.

    ``model`` None means the model is not known yet (the ``task`` tool deciding
    which subagent types to offer): the vision gate is then left open.
    """
    commands_allowed = get_sandbox_provider(settings).allows_commands
    memory_tools = (
        kind == "lead_agent" and settings.memory.enabled and settings.memory.mode == "tool"
    )
    searchable = search_available(settings.web)
    vision = model is None or model.supports_vision

    def include(entry: ToolConfig) -> bool:
        if entry.group == VISION_GROUP and not vision:
            return False
        if entry.group == MEMORY_GROUP and not memory_tools:
            return False
        if entry.name == "web_search" and entry.use == "tools.web:web_search" and not searchable:
            return False
        return not (entry.group == COMMAND_GROUP and not commands_allowed)

    return include


def select_tools(
    settings: Settings,
    *,
    kind: AgentKind,
    model: ModelConfig,
    subagent_type: SubagentType | None = None,
) -> list[BaseTool]:
    """The tools an agent of ``kind`` is offered on ``model`` (``task`` and
    ``tool_search`` are added by the agent build). ``subagent_type`` is the
    subagent's type; None means ``general-purpose``. Ignored for the lead."""
    gate = capability_gate(settings, kind=kind, model=model)
    groups = settings.tool_groups.for_kind(kind)
    manager = get_mcp_manager(settings)
    with_mcp = manager is not None and (groups is None or MCP_GROUP in groups)
    if kind == "lead_agent":
        tools = load_tools(settings, groups=groups, include=gate)
    else:
        chosen = subagent_type or subagent_types(settings)[DEFAULT_SUBAGENT_TYPE]
        tools = resolve_type_tools(settings, chosen, TOOL_CATALOG, include=gate)
        with_mcp = with_mcp and type_takes_mcp_tools(chosen)
    if manager is not None and with_mcp:
        tools.extend(manager.tools())
    return tools


def deferred_catalog(settings: Settings) -> list[BaseTool]:
    """Every deferred tool an agent of ``settings`` may have (configured and MCP)."""
    configured = [tool for tool in load_tools(settings) if (tool.metadata or {}).get("deferred")]
    manager = get_mcp_manager(settings)
    mcp = [t for t in manager.tools() if (t.metadata or {}).get("deferred")] if manager else []
    return configured + mcp


def reserved_tool_names(settings: Settings) -> list[str]:
    """Names MCP tools may not take (built-in and configured tools, ``task``)."""
    return [entry.name for entry in tool_configs(settings)] + ["task", "tool_search"]
