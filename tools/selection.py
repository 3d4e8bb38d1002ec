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
import tools.view_image  # noqa: F401
from runtime.config import ModelConfig, Settings, ToolConfig
from sandbox.provider import get_sandbox_provider
from tools.registry import load_tools

__all__ = ["COMMAND_GROUP", "MEMORY_GROUP", "VISION_GROUP", "select_tools"]

VISION_GROUP = "vision"
COMMAND_GROUP = "sandbox"
MEMORY_GROUP = "memory"


def select_tools(
    settings: Settings, *, kind: Literal["lead_agent", "subagent"], model: ModelConfig
) -> list[BaseTool]:
    commands_allowed = get_sandbox_provider(settings).allows_commands
    memory_tools = (
        kind == "lead_agent" and settings.memory.enabled and settings.memory.mode == "tool"
    )

    def include(entry: ToolConfig) -> bool:
        if entry.group == VISION_GROUP and not model.supports_vision:
            return False
        if entry.group == MEMORY_GROUP and not memory_tools:
            return False
        return not (entry.group == COMMAND_GROUP and not commands_allowed)

    return load_tools(settings, groups=settings.tool_groups.for_kind(kind), include=include)
