"""Which tools an agent gets: configured groups, then capability gates.

``tool_groups`` in config picks groups per agent kind. Two groups are gated
whatever the config says, because offering a tool that cannot work only
wastes the model's turns: ``vision`` needs a model entry with
``supports_vision``, and ``sandbox`` (shell commands) needs a provider that
allows commands (``sandbox.allow_host_bash`` on the local provider). The
``memory`` group is offered only to the lead agent with ``memory.mode: tool``.
"""

from __future__ import annotations

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
from tools.mcp import get_mcp_manager
from tools.registry import load_tools, tool_configs
from tools.web import search_available

__all__ = [
    "COMMAND_GROUP",
    "MCP_GROUP",
    "MEMORY_GROUP",
    "VISION_GROUP",
    "deferred_catalog",
    "reserved_tool_names",
    "select_tools",
]

VISION_GROUP = "vision"
COMMAND_GROUP = "sandbox"
MEMORY_GROUP = "memory"
MCP_GROUP = "mcp"


def select_tools(
    settings: Settings, *, kind: Literal["lead_agent", "subagent"], model: ModelConfig
) -> list[BaseTool]:
    commands_allowed = get_sandbox_provider(settings).allows_commands
    memory_tools = (
        kind == "lead_agent" and settings.memory.enabled and settings.memory.mode == "tool"
    )
    searchable = search_available(settings.web)

    def include(entry: ToolConfig) -> bool:
        if entry.group == VISION_GROUP and not model.supports_vision:
            return False
        if entry.group == MEMORY_GROUP and not memory_tools:
            return False
        if entry.name == "web_search" and entry.use == "tools.web:web_search" and not searchable:
            return False
        return not (entry.group == COMMAND_GROUP and not commands_allowed)

    tools = load_tools(settings, groups=settings.tool_groups.for_kind(kind), include=include)
    manager = get_mcp_manager(settings)
    groups = settings.tool_groups.for_kind(kind)
    if manager is not None and (groups is None or MCP_GROUP in groups):
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
