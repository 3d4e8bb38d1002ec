"""Resolve the ``tools:`` config list into ``BaseTool`` objects.

Tools are resolved per agent build from already-imported modules (the import
happens once, at first use), so this does no I/O on the event loop after warm-up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache

from langchain_core.tools import BaseTool

from runtime.config import ConfigError, Settings, ToolConfig, import_object

__all__ = ["DEFAULT_TOOLS", "load_tools", "tool_configs"]

# The built-in default tool set, used when config has no ``tools:`` key.
# Groups: ``sandbox`` (shell; needs a provider that allows commands), ``files``,
# ``web`` (web_fetch; web_search only when its provider has a key),
# ``present`` (lead only by default), ``vision`` (vision models only) and
# ``clarification`` (lead only by default: a subagent cannot ask the user) and
# ``memory`` (only with ``memory.mode: tool``, lead only: subagents never write memory).
DEFAULT_TOOLS: tuple[ToolConfig, ...] = (
    ToolConfig(name="bash", group="sandbox", use="tools.sandbox:bash"),
    ToolConfig(name="ls", group="files", use="tools.files:ls"),
    ToolConfig(name="glob", group="files", use="tools.files:glob_tool"),
    ToolConfig(name="grep", group="files", use="tools.files:grep"),
    ToolConfig(name="read_file", group="files", use="tools.files:read_file"),
    ToolConfig(name="write_file", group="files", use="tools.files:write_file"),
    ToolConfig(name="str_replace", group="files", use="tools.files:str_replace"),
    ToolConfig(name="present_files", group="present", use="tools.present:present_files"),
    ToolConfig(name="web_fetch", group="web", use="tools.web:web_fetch"),
    ToolConfig(name="web_search", group="web", use="tools.web:web_search"),
    ToolConfig(name="view_image", group="vision", use="tools.view_image:view_image"),
    ToolConfig(
        name="ask_clarification", group="clarification", use="tools.clarification:ask_clarification"
    ),
    ToolConfig(name="memory_save", group="memory", use="tools.memory:memory_save"),
    ToolConfig(name="memory_search", group="memory", use="tools.memory:memory_search"),
    ToolConfig(name="memory_delete", group="memory", use="tools.memory:memory_delete"),
)


def tool_configs(settings: Settings) -> tuple[ToolConfig, ...]:
    return DEFAULT_TOOLS if settings.tools is None else tuple(settings.tools)


@cache
def _resolve(use: str, name: str) -> BaseTool:
    obj = import_object(use, what=f"tool {name!r} use")
    if not isinstance(obj, BaseTool) and callable(obj):
        obj = obj()
    if not isinstance(obj, BaseTool):
        raise ConfigError(f"tool {name!r} use: {use!r} is not a BaseTool or a factory of one")
    if obj.name != name:
        obj = obj.model_copy(update={"name": name})
    return obj


def load_tools(
    settings: Settings,
    *,
    groups: Iterable[str] | None = None,
    include: Callable[[ToolConfig], bool] | None = None,
) -> list[BaseTool]:
    """Tools from config, optionally limited to ``groups`` and a predicate."""
    wanted = None if groups is None else set(groups)
    result: list[BaseTool] = []
    for entry in tool_configs(settings):
        if wanted is not None and entry.group not in wanted:
            continue
        if include is not None and not include(entry):
            continue
        resolved = _resolve(entry.use, entry.name)
        if entry.deferred:
            metadata = {**(resolved.metadata or {}), "deferred": True}
            resolved = resolved.model_copy(update={"metadata": metadata})
        result.append(resolved)
    return result
