"""The switches of one run, read from ``configurable`` merged with ``context``.

LangGraph Server mirrors a run's ``context`` into ``configurable``; callers of
the plain graph may use either. ``context`` wins where both are set. Absent keys
stay ``None`` so "not given" is never confused with ``False``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

__all__ = ["RunOptions", "merged_run_config", "resolve_run_options", "skill_references_of"]


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
