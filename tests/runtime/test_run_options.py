"""Run switches: configurable merged with context, absent vs falsy kept apart."""

from __future__ import annotations

from runtime.run_options import resolve_run_options


def test_absent_is_none_and_false_is_false() -> None:
    options = resolve_run_options({"configurable": {"is_plan_mode": False}})
    assert options.is_plan_mode is False
    assert options.subagent_enabled is None
    assert options.effective(subagents_default=True)["subagent_enabled"] is True
    explicit = resolve_run_options({"configurable": {"subagent_enabled": False}})
    assert explicit.effective(subagents_default=True)["subagent_enabled"] is False


def test_context_overrides_configurable() -> None:
    config = {
        "configurable": {"model_name": "a", "thinking_enabled": True},
        "context": {"model_name": "b"},
    }
    options = resolve_run_options(config)  # type: ignore[arg-type]
    assert options.model_name == "b"
    assert options.thinking_enabled is True


def test_string_flags_and_empty_config() -> None:
    assert resolve_run_options({"configurable": {"is_plan_mode": "true"}}).is_plan_mode is True
    assert resolve_run_options({"configurable": {"is_plan_mode": "0"}}).is_plan_mode is False
    assert resolve_run_options(None).model_name is None
