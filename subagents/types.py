"""Subagent types: the built-ins (``general-purpose``, ``bash``) and custom ones from config.

A type fixes a subagent's system prompt, tools, model and limits. Tools are
selected by name and group from the tool registry, so a type picks up whatever
tools the deployment configures; the capability gates (vision model, search key,
shell commands, memory tools lead-only) are applied on top by
``tools.selection.select_tools``, the one place that builds an agent's tool list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from langchain_core.tools import BaseTool

from runtime.config import ConfigError, Settings, ToolConfig
from subagents.contract import TASK_TOOL_NAME

__all__ = [
    "BASH_TOOL_GROUPS",
    "BASH_TOOL_NAMES",
    "DEFAULT_SUBAGENT_TYPE",
    "MCP_SELECTOR",
    "NEVER_DELEGATED_TOOLS",
    "SUBAGENT_SYSTEM_PROMPT",
    "SubagentType",
    "ToolCatalog",
    "available_subagent_types",
    "resolve_subagent_model",
    "resolve_type_tools",
    "subagent_types",
    "type_takes_mcp_tools",
]

DEFAULT_SUBAGENT_TYPE = "general-purpose"

SUBAGENT_SYSTEM_PROMPT = """\
You are a focused subagent. Complete the delegated task with your tools, then
reply with a concise result the lead agent can use. Do not ask the user questions.
"""


@dataclass(frozen=True)
class ToolCatalog:
    """The configured tools, as the tool registry (``tools.registry``) resolves them.

    Passed in by the callers (the task tool, the subagent graph builder): this
    layer selects tools for a type but does not import the tools layer.
    """

    load_tools: Callable[..., list[BaseTool]]
    tool_configs: Callable[[Settings], Iterable[ToolConfig]]


# Selects the MCP servers' tools (the ``mcp`` tool group). They are discovered
# at run time, not configured under ``tools:``, so the graph builder adds them.
MCP_SELECTOR = "group:mcp"

# A subagent never delegates further and never talks to the user.
NEVER_DELEGATED_TOOLS: frozenset[str] = frozenset({TASK_TOOL_NAME, "ask_clarification"})
# The general-purpose type also leaves presenting deliverables to the lead.
_GENERAL_EXCLUDED: frozenset[str] = NEVER_DELEGATED_TOOLS | {"present_files"}

BASH_TOOL_NAMES: frozenset[str] = frozenset(
    {"bash", "ls", "glob", "grep", "read_file", "write_file", "str_replace"}
)
BASH_TOOL_GROUPS: frozenset[str] = frozenset({"sandbox", "bash", "file", "file:read", "file:write"})

BASH_SUBAGENT_SYSTEM_PROMPT = """\
You are a command-line subagent. Complete the delegated task with the shell and
file tools in the sandboxed workspace (/mnt/user-data/workspace). Run commands
step by step, check their output, and reply with a concise report of what you
ran and what you found. Do not ask the user questions.
"""


@dataclass(frozen=True)
class SubagentType:
    """One kind of subagent the ``task`` tool can start.

    ``tools`` holds selectors (a tool name or ``group:<group>``); None means
    the general-purpose set. ``max_turns`` / ``timeout_seconds`` of None take
    the ``subagents`` defaults.
    """

    name: str
    description: str
    system_prompt: str
    tools: tuple[str, ...] | None = None
    model: str = "inherit"
    max_turns: int | None = None
    timeout_seconds: float | None = None
    builtin: bool = False


def _builtin_types(settings: Settings) -> list[SubagentType]:
    model = settings.subagents.model
    return [
        SubagentType(
            name="general-purpose",
            description=(
                "A capable agent with the lead's tools (except task, ask_clarification and "
                "present_files) for a bounded, independent piece of research or work."
            ),
            system_prompt=SUBAGENT_SYSTEM_PROMPT,
            model=model,
            builtin=True,
        ),
        SubagentType(
            name="bash",
            description=(
                "A command-line specialist with the shell and file tools, for a bounded "
                "sequence of commands whose output the lead does not need to see step by step."
            ),
            system_prompt=BASH_SUBAGENT_SYSTEM_PROMPT,
            tools=tuple(sorted(BASH_TOOL_NAMES))
            + tuple(f"group:{group}" for group in sorted(BASH_TOOL_GROUPS)),
            model=model,
            builtin=True,
        ),
    ]


def subagent_types(settings: Settings) -> dict[str, SubagentType]:
    """Every configured type by name: built-ins first, then ``subagents.types``."""
    types = {entry.name: entry for entry in _builtin_types(settings)}
    for custom in settings.subagents.types:
        types[custom.name] = SubagentType(
            name=custom.name,
            description=custom.description,
            system_prompt=custom.system_prompt,
            tools=None if custom.tools is None else tuple(custom.tools),
            model=custom.model,
            max_turns=custom.max_turns,
            timeout_seconds=custom.timeout_seconds,
        )
    return types


def _selected(entry: ToolConfig, selectors: Sequence[str]) -> bool:
    return entry.name in selectors or f"group:{entry.group}" in selectors


def type_takes_mcp_tools(subagent_type: SubagentType) -> bool:
    """Whether the type gets the MCP servers' tools: the general-purpose set does,
    a type with a tool list only when it names ``group:mcp``."""
    return subagent_type.tools is None or MCP_SELECTOR in subagent_type.tools


def resolve_type_tools(
    settings: Settings,
    subagent_type: SubagentType,
    catalog: ToolCatalog,
    *,
    include: Callable[[ToolConfig], bool] | None = None,
) -> list[BaseTool]:
    """The configured tools of ``subagent_type``; an unknown name in a custom type is a
    ConfigError. ``include`` narrows them further (the tools layer's capability gates:
    ``tools.selection.select_tools`` is the caller that builds an agent's tool list)."""
    load_tools, tool_configs = catalog.load_tools, catalog.tool_configs
    gate = include or (lambda _entry: True)
    if subagent_type.tools is None:
        return load_tools(
            settings, include=lambda entry: entry.name not in _GENERAL_EXCLUDED and gate(entry)
        )
    selectors = subagent_type.tools
    if not subagent_type.builtin:
        known_names = {entry.name for entry in tool_configs(settings)}
        known_groups = {f"group:{entry.group}" for entry in tool_configs(settings)}
        known_groups.add(MCP_SELECTOR)
        unknown = [s for s in selectors if s not in known_names and s not in known_groups]
        if unknown:
            raise ConfigError(
                f"subagents.types ({subagent_type.name!r}) tools: unknown tool or group "
                f"{', '.join(repr(u) for u in unknown)}"
            )
    return load_tools(
        settings,
        include=lambda entry: (
            entry.name not in NEVER_DELEGATED_TOOLS and _selected(entry, selectors) and gate(entry)
        ),
    )


def available_subagent_types(
    settings: Settings,
    catalog: ToolCatalog,
    *,
    include: Callable[[ToolConfig], bool] | None = None,
) -> list[SubagentType]:
    """The types the task tool offers: a built-in ``bash`` with no tools (after
    ``include``, the capability gates) is left out."""
    result = []
    for entry in subagent_types(settings).values():
        if (
            entry.name == "bash"
            and entry.builtin
            and not resolve_type_tools(settings, entry, catalog, include=include)
        ):
            continue
        result.append(entry)
    return result


def resolve_subagent_model(subagent_type: SubagentType, parent_model: str | None) -> str | None:
    """The model name a subagent of this type runs: its own, or the parent's (``inherit``)."""
    if subagent_type.model == "inherit":
        return parent_model
    return subagent_type.model
