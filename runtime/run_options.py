"""The switches of one run, read from ``configurable`` merged with ``context``.

LangGraph Server mirrors a run's ``context`` into ``configurable``; callers of
the plain graph may use either. ``context`` wins where both are set. Absent keys
stay ``None`` so "not given" is never confused with ``False``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

from langchain_core.runnables import RunnableConfig
from pydantic import Field
from typing_extensions import TypedDict

__all__ = [
    "RUN_SWITCHES",
    "SUBAGENT_SWITCHES",
    "RunOptions",
    "RunSwitch",
    "context_schema_for",
    "merged_run_config",
    "resolve_run_options",
    "skill_references_of",
]


@dataclass(frozen=True)
class RunSwitch:
    """One key a caller may set in a run's ``context`` (or ``configurable``).

    The graphs' ``context_schema`` is built from these rows, so Studio's context
    panel and ``assistants.get_schemas`` list them with their descriptions and
    defaults. LangGraph Server drops ``context`` keys that are not in the
    schema before the graph sees them: **a new switch must be added here.**
    """

    name: str
    type: Any
    description: str
    default: Any = None


# Add a switch here (and read it in ``resolve_run_options`` or where it is used).
RUN_SWITCHES: tuple[RunSwitch, ...] = (
    RunSwitch(
        "model_name",
        str | None,
        "Name of a `models:` entry in config.yaml. Empty: the first (default) entry. "
        "An unknown name runs the default model and records a warning.",
    ),
    RunSwitch(
        "thinking_enabled",
        bool,
        "Ask the model to think first (only for entries with supports_thinking).",
        False,
    ),
    RunSwitch(
        "is_plan_mode",
        bool,
        "Plan mode: the agent keeps a todo list and works through it.",
        False,
    ),
    RunSwitch(
        "subagent_enabled",
        bool | None,
        "Give the lead agent the `task` tool to delegate to subagents. "
        "Empty: config subagents.enabled.",
    ),
    RunSwitch(
        "max_concurrent_subagents",
        int | None,
        "How many subagents may run at once (capped by config). Empty: config subagents.max_concurrent_subagents.",
    ),
    RunSwitch(
        "max_total_subagents",
        int | None,
        "How many subagents one run may start in total (capped by config). Empty: config subagents.max_total_per_run.",
    ),
    RunSwitch(
        "agent_name",
        str | None,
        "A label for the run's metadata (default: the graph's name).",
    ),
    RunSwitch(
        "disable_clarification",
        bool,
        "Never pause to ask the user a clarifying question.",
        False,
    ),
    RunSwitch(
        "user_id",
        str | None,
        "Set by the server from the authenticated caller; a caller's value is replaced.",
    ),
    RunSwitch(
        "memory_enabled",
        bool | None,
        "False: this run neither recalls nor records long-term memory. Empty: on when "
        "config memory.enabled.",
    ),
    RunSwitch(
        "skill_references",
        list[str] | None,
        "Skills to activate for this turn (1-16 names, all must be enabled and allowed), "
        "as if the message started with /name.",
    ),
    RunSwitch(
        "skill_allowlist",
        list[str] | None,
        "Only these skills may be used in this run (narrows the configured set, never widens it).",
    ),
)

# Only the ``subagent`` graph reads these.
SUBAGENT_SWITCHES: tuple[RunSwitch, ...] = (
    RunSwitch(
        "subagent_type",
        str,
        "Which subagent type runs (config subagents.types); it fixes prompt, tools and model.",
        "general-purpose",
    ),
)


def _schema(name: str, doc: str, switches: tuple[RunSwitch, ...]) -> type:
    fields = {
        switch.name: Annotated[
            switch.type, Field(description=switch.description, default=switch.default)
        ]
        for switch in switches
    }
    schema: type = TypedDict(name, fields, total=False)  # type: ignore[misc, operator]
    schema.__doc__ = doc
    return schema


_LEAD_CONTEXT = _schema(
    "LeadAgentContext",
    "Run switches of the lead agent; every key is optional.",
    RUN_SWITCHES,
)
_SUBAGENT_CONTEXT = _schema(
    "SubagentContext",
    "Run switches of a subagent run; every key is optional.",
    RUN_SWITCHES + SUBAGENT_SWITCHES,
)


def context_schema_for(kind: Literal["lead_agent", "subagent"]) -> type:
    """The ``context_schema`` a graph of ``kind`` declares."""
    return _SUBAGENT_CONTEXT if kind == "subagent" else _LEAD_CONTEXT


def merged_run_config(config: RunnableConfig | None) -> dict[str, Any]:
    """``configurable`` overlaid with ``context`` (when the config carries one)."""
    if not config:
        return {}
    merged: dict[str, Any] = dict(config.get("configurable") or {})
    context = config.get("context")  # type: ignore[typeddict-item]
    if isinstance(context, dict):
        merged.update(context)
    return merged


def _flag(values: dict[str, Any], key: str) -> bool | None:
    if key not in values or values[key] is None:
        return None
    value = values[key]
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return bool(value)


def _int(values: dict[str, Any], key: str) -> int | None:
    """An integer switch; anything that is not a whole number is "not given"."""
    value = values.get(key)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _text(values: dict[str, Any], key: str) -> str | None:
    value = values.get(key)
    if value is None:
        return None
    return str(value)


@dataclass(frozen=True)
class RunOptions:
    """What the caller asked for. ``None`` means "not given": use the default."""

    model_name: str | None = None
    thinking_enabled: bool | None = None
    is_plan_mode: bool | None = None
    subagent_enabled: bool | None = None
    agent_name: str | None = None
    thread_id: str | None = None
    max_concurrent_subagents: int | None = None
    max_total_subagents: int | None = None
    memory_enabled: bool | None = None
    """False: this run neither recalls nor records long-term memory (default on)."""
    skill_references: tuple[Any, ...] | None = None
    """Skills to activate for this turn (1-16 names, validated by SkillActivation)."""
    skill_allowlist: tuple[str, ...] | None = None
    """Only these skills (narrows, never widens; how a subagent inherits its parent's)."""
    subagent_type: str | None = None

    def effective(self, *, subagents_default: bool) -> dict[str, Any]:
        """The switches as applied, for run metadata and middleware assembly."""
        return {
            "thinking_enabled": bool(self.thinking_enabled),
            "is_plan_mode": bool(self.is_plan_mode),
            "subagent_enabled": (
                subagents_default if self.subagent_enabled is None else self.subagent_enabled
            ),
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_run_options(config: RunnableConfig | None) -> RunOptions:
    values = merged_run_config(config)
    return RunOptions(
        model_name=_text(values, "model_name") or _text(values, "model"),
        thinking_enabled=_flag(values, "thinking_enabled"),
        is_plan_mode=_flag(values, "is_plan_mode"),
        subagent_enabled=_flag(values, "subagent_enabled"),
        agent_name=_text(values, "agent_name"),
        thread_id=_text(values, "thread_id"),
        max_concurrent_subagents=_int(values, "max_concurrent_subagents"),
        max_total_subagents=_int(values, "max_total_subagents"),
        memory_enabled=_flag(values, "memory_enabled"),
        skill_references=skill_references_of(values),
        skill_allowlist=_names(values, "skill_allowlist"),
        subagent_type=_text(values, "subagent_type"),
    )


def _names(values: dict[str, Any], key: str) -> tuple[str, ...] | None:
    """A list of names; a malformed value narrows to nothing (closed), never widens."""
    value = values.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def skill_references_of(values: dict[str, Any]) -> tuple[Any, ...] | None:
    """A list of names; an empty list or null is "not given", a bare string one name.

    Entries are kept as given: SkillActivationMiddleware rejects the whole batch
    when any is not a valid, usable skill name.
    """
    value = values.get("skill_references")
    if value is None:
        return None
    if isinstance(value, str):
        return (value,) if value.strip() else None
    if isinstance(value, list | tuple):
        return tuple(value) or None
    return (value,)
