"""A test extension installed through ``plugins:`` lands at each documented anchor.

Covers plugin loading, placement anchors and fallbacks in both chains, order
and scope, the ordering invariant failure, contributor failures, the task
store's lifetime, and the failure-isolation table on real agent runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

from deerflow_extension_api import AgentScope, ExtensionOrderingError, HostPolicySnapshot
from deerflow_extension_api._plugins import load_extensions
from graphs.lead_agent import build_lead_agent
from graphs.subagent import build_subagent
from middlewares import chain
from middlewares.chain import describe_chain
from runtime.config import ConfigError, get_settings
from tests.support.chain_fixtures import inputs_for, probe_factories
from tests.support.demo_extension import Recorder
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config

PLUGIN = "tests.support.demo_extension"
ENTRY = f"{PLUGIN}:install"
PREFIX = "extension_tests_support_demo_extension_install_"

EVERY_PLACEMENT: list[dict[str, Any]] = [
    {"kind": "ToolObserver", "placement": "TOOL_VISIBLE"},
    {"kind": "ModelObserver", "placement": "MODEL_LOGICAL"},
    {"kind": "StateObserver", "placement": "STANDARD"},
    {"kind": "ModelObserver", "placement": "MODEL_PHYSICAL"},
    {"kind": "ToolObserver", "placement": "TOOL_RAW"},
]


def _plugin(contributions: list[dict[str, Any]], **config: Any) -> list[dict[str, Any]]:
    return [{"module": PLUGIN, "config": {"contributions": contributions, **config}}]


@pytest.fixture
def all_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chain, "FACTORIES", probe_factories())


def _around(names: list[str], name: str) -> tuple[str | None, str | None]:
    index = names.index(name)
    before = names[index - 1] if index > 0 else None
    after = names[index + 1] if index + 1 < len(names) else None
    return before, after


def test_each_placement_lands_at_its_documented_anchor_in_both_chains(
    all_probes: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inputs = inputs_for(tmp_path, plugins=_plugin(EVERY_PLACEMENT))
    lead = [m.name for m in describe_chain(inputs)]
    assert lead[0] == f"{PREFIX}ToolObserver_0"  # TOOL_VISIBLE: outermost
    assert lead[1] == "InputSanitizationMiddleware"
    # MODEL_LOGICAL then STANDARD (same anchor, registration order), just outer of LLMErrorHandling.
    at = lead.index("LLMErrorHandlingMiddleware")
    assert lead[at - 2 : at] == [f"{PREFIX}ModelObserver_0", f"{PREFIX}StateObserver_0"]
    # MODEL_PHYSICAL then TOOL_RAW: inner of the finish-reason tail, outer of Clarification.
    assert lead[-3:] == [
        f"{PREFIX}ModelObserver_1",
        f"{PREFIX}ToolObserver_1",
        "ClarificationMiddleware",
    ]
    assert lead[-4] == "ModelLengthFinishReasonMiddleware"
    assert not [r for r in caplog.records if "fell back" in r.getMessage()]

    sub = [m.name for m in describe_chain(inputs.for_scope(AgentScope.SUBAGENT))]
    assert sub[:2] == [f"{PREFIX}ToolObserver_0", "InputSanitizationMiddleware"]
    at = sub.index("LLMErrorHandlingMiddleware")
    assert sub[at - 2 : at] == [f"{PREFIX}ModelObserver_0", f"{PREFIX}StateObserver_0"]
    # MODEL_PHYSICAL inner of the coalescer; TOOL_RAW falls back to the innermost end.
    assert sub[-3:] == [
        "SystemMessageCoalescingMiddleware",
        f"{PREFIX}ModelObserver_1",
        f"{PREFIX}ToolObserver_1",
    ]
    warnings = [r.getMessage() for r in caplog.records if "fell back" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        f"Extension {ENTRY}: placement TOOL_RAW fell back to a secondary anchor "
        "(primary anchor middleware is absent from this stack);"
    )


def test_missing_anchors_fall_back_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chain, "FACTORIES", {})  # a stack without any anchor
    inputs = inputs_for(tmp_path, plugins=_plugin(EVERY_PLACEMENT))
    lead = [m.name for m in describe_chain(inputs)]
    assert lead == [
        f"{PREFIX}ToolObserver_0",
        f"{PREFIX}ModelObserver_0",
        f"{PREFIX}StateObserver_0",
        f"{PREFIX}ModelObserver_1",
        f"{PREFIX}ToolObserver_1",
    ]
    fallbacks = {r.getMessage().split("placement ")[1].split(" ")[0] for r in caplog.records}
    assert fallbacks == {"TOOL_VISIBLE", "MODEL_LOGICAL", "STANDARD", "MODEL_PHYSICAL", "TOOL_RAW"}


def test_order_then_registration_and_scope(all_probes: None, tmp_path: Path) -> None:
    contributions: list[dict[str, Any]] = [
        {"kind": "ToolObserver", "placement": "TOOL_VISIBLE", "order": 5, "label": "late"},
        {"kind": "ToolObserver", "placement": "TOOL_VISIBLE", "order": -1, "label": "early"},
        {"kind": "ToolObserver", "placement": "TOOL_VISIBLE", "order": 5, "label": "late2"},
        {"kind": "StateObserver", "placement": "STANDARD", "scope": "LEAD"},
        {"kind": "ModelObserver", "placement": "MODEL_LOGICAL", "scope": "SUBAGENT"},
    ]
    inputs = inputs_for(tmp_path, plugins=_plugin(contributions))
    lead = describe_chain(inputs)
    labels = [getattr(m.middleware, "inner", None) for m in lead[:3]]
    assert [x.label for x in labels] == ["early", "late", "late2"]  # type: ignore[union-attr]
    names = [m.name for m in lead]
    assert f"{PREFIX}StateObserver_0" in names
    assert not any("ModelObserver" in n for n in names)
    sub = [m.name for m in describe_chain(inputs.for_scope(AgentScope.SUBAGENT))]
    assert f"{PREFIX}ModelObserver_0" in sub
    assert not any("StateObserver" in n for n in sub)


def test_an_ordering_violation_fails_construction_naming_the_extension(
    all_probes: None, tmp_path: Path, use_config: Any
) -> None:
    plugins = _plugin([{"kind": "ModelAndToolObserver", "placement": "TOOL_VISIBLE"}])
    inputs = inputs_for(tmp_path, plugins=plugins)
    with pytest.raises(ExtensionOrderingError) as caught:
        describe_chain(inputs)
    message = str(caught.value)
    assert f"extension {ENTRY} ({PREFIX}ModelAndToolObserver_0)" in message
    assert (
        "InputSanitizationMiddleware, which must be the outermost wrap_model_call layer" in message
    )
    use_config(write_config(tmp_path, [ai_text("hi")], plugins=plugins))
    with pytest.raises(ExtensionOrderingError, match=ENTRY):
        build_lead_agent(get_settings(), {})


def test_contributor_failures_are_logged_and_skipped(
    all_probes: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raising = inputs_for(tmp_path, plugins=_plugin(EVERY_PLACEMENT, raise_in_contribute=True))
    assert not any("extension_" in m.name for m in describe_chain(raising))
    assert (
        f"Extension {ENTRY}: DemoContributor.contribute_middlewares failed and was skipped: "
        "contributor exploded"
    ) in caplog.text
    junk = inputs_for(tmp_path, plugins=_plugin(EVERY_PLACEMENT[:1], junk_item=True))
    names = [m.name for m in describe_chain(junk)]
    assert names[0] == f"{PREFIX}ToolObserver_0"
    assert "returned str, not a valid MiddlewarePlacement" in caplog.text
    assert "the item was skipped" in caplog.text
    # Issue 19.6: an invalid MiddlewarePlacement drops only that item, not the contributor.
    invalid = inputs_for(tmp_path, plugins=_plugin(EVERY_PLACEMENT[:1], invalid_placement=True))
    names = [m.name for m in describe_chain(invalid)]
    assert names[0] == f"{PREFIX}ToolObserver_0"
    assert "MiddlewarePlacement.middleware must be an AgentMiddleware instance" in caplog.text


def test_plugin_and_configured_middleware_errors_name_the_entry(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"plugins": ["no_such_plugin_module"]},
            "plugins[0] ('no_such_plugin_module'): cannot import",
        ),
        ({"plugins": [f"{PLUGIN}:missing"]}, "has no missing()"),
        (
            {"extensions": {"middlewares": ["tests.support.demo_extension:Nope"]}},
            "extensions.middlewares[0] (tests.support.demo_extension:Nope): module",
        ),
        (
            {"extensions": {"middlewares": ["tests.support.demo_extension:NOT_A_MIDDLEWARE"]}},
            "is not an AgentMiddleware class",
        ),
        (
            {"extensions": {"middlewares": [{"class": f"{PLUGIN}:ExplodingConstructor"}]}},
            "extensions.middlewares[0] (tests.support.demo_extension:ExplodingConstructor): "
            "constructor failed: ValueError('no way')",
        ),
    ]
    for sections, expected in cases:
        inputs = inputs_for(tmp_path, **sections)
        with pytest.raises(ConfigError) as caught:
            describe_chain(inputs)
        assert expected in str(caught.value)


def test_configured_middleware_kwargs_are_json_and_dates_become_iso(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "models: [{name: s, use: 'runtime.scripted_model:ScriptedChatModel'}]\n"
        "extensions:\n"
        "  middlewares:\n"
        "    - class: tests.support.demo_extension:ConfiguredAudit\n"
        "      kwargs: {level: debug, since: 2024-05-01, limit: 7}\n",
        encoding="utf-8",
    )
    from runtime.config import load_settings

    settings = load_settings(path)
    entry = settings.extensions.middlewares[0]
    assert entry.kwargs == {"level": "debug", "since": "2024-05-01", "limit": 7}
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "extensions:\n  middlewares:\n    - {class: 'a:B', kwargs: {blob: !!binary aGk=}}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"extensions\.middlewares\[0\]\.kwargs"):
        load_settings(bad)


@tool
async def counted(text: str) -> str:
    """Echo with a side effect counter (each real execution is recorded)."""
    EXECUTIONS.append(text)
    return f"ran {text}"


@tool("counted")
def sync_counted(text: str) -> str:
    """The same tool, synchronous."""
    EXECUTIONS.append(text)
    return f"ran {text}"


EXECUTIONS: list[str] = []

SCRIPT = [
    ai_tools(tool_call("counted", text="one")),
    ai_tools(tool_call("counted", text="two")),
    ai_text("done"),
]


def _config(
    tmp_path: Path, contributions: list[dict[str, Any]], filename: str = "config.yaml"
) -> Path:
    return write_config(
        tmp_path,
        SCRIPT,
        filename=filename,
        tools=[{"name": "counted", "use": "tests.deerflow_extension_api.test_plugins:counted"}],
        plugins=_plugin(contributions),
    )


async def _run(config: RunnableConfig | None = None) -> list[Any]:
    graph = build_lead_agent(get_settings(), config or {})
    result = await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
    return result["messages"]


def _recorder() -> Recorder:
    recorder = load_extensions(get_settings()).app_store.get(Recorder)
    assert recorder is not None
    return recorder


async def test_runs_see_a_fresh_task_store_and_the_build_context(
    tmp_path: Path, use_config: Any
) -> None:
    use_config(
        _config(
            tmp_path,
            [
                {"kind": "ToolObserver", "placement": "TOOL_VISIBLE"},
                {"kind": "StateObserver", "placement": "STANDARD"},
            ],
        )
    )
    await _run({"configurable": {"thread_id": "a", "agent_name": "researcher"}})
    recorder = _recorder()
    first = [e for e in recorder.events if e[2] in ("in", "before_model")]
    # One task store per run: tool calls and state hooks share one counter.
    assert [e[3] for e in first] == [1, 2, 3, 4, 5]
    await _run({"configurable": {"thread_id": "b"}})
    second = [e for e in recorder.events if e[2] in ("in", "before_model")][len(first) :]
    assert [e[3] for e in second] == [1, 2, 3, 4, 5]  # a new run, a new store
    context = recorder.contexts[0]
    assert context.scope is AgentScope.LEAD
    assert context.agent_name == "researcher"
    assert context.model_name == "scripted"
    assert context.policy == HostPolicySnapshot(max_subagents_per_run=6)
    build_subagent(get_settings(), {})
    assert recorder.contexts[-1].scope is AgentScope.SUBAGENT
    assert recorder.contexts[-1].policy.max_subagents_per_run is None


@pytest.mark.parametrize("axis", ["ToolObserver", "ModelObserver"])
@pytest.mark.parametrize(
    "mode", ["raise_before", "never_call", "raise_after", "call_twice", "modify"]
)
async def test_misbehaving_wrap_hooks_never_change_the_run(
    tmp_path: Path, use_config: Any, caplog: pytest.LogCaptureFixture, axis: str, mode: str
) -> None:
    placement = "TOOL_VISIBLE" if axis == "ToolObserver" else "MODEL_LOGICAL"
    EXECUTIONS.clear()
    use_config(_config(tmp_path, [], filename="clean.yaml"))
    baseline = await _run()
    baseline_runs = list(EXECUTIONS)
    EXECUTIONS.clear()
    use_config(_config(tmp_path, [{"kind": axis, "placement": placement, "mode": mode}]))
    messages = await _run()
    assert [(type(m).__name__, m.content) for m in messages] == [
        (type(m).__name__, m.content) for m in baseline
    ]
    assert EXECUTIONS == baseline_runs == ["one", "two"]  # each tool ran exactly once
    assert sum(isinstance(m, AIMessage) for m in messages) == 3  # one model call per step
    diagnostics = [
        r.getMessage() for r in caplog.records if "failed and was skipped" in r.getMessage()
    ]
    if mode == "modify":
        assert diagnostics == []
    else:
        assert diagnostics and diagnostics[0].startswith(f"Extension {ENTRY}: {axis}.awrap_")


async def test_lifecycle_hook_failures_apply_no_update(
    tmp_path: Path, use_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    use_config(
        _config(tmp_path, [{"kind": "StateObserver", "placement": "STANDARD", "mode": "raise"}])
    )
    graph = build_lead_agent(get_settings(), {})
    result = await graph.ainvoke({"messages": [HumanMessage("go")]})
    assert result["messages"][-1].content == "done"
    # The observer's update ("seen N messages") was dropped; the title is
    # TitleMiddleware's, from the first user message.
    assert not str(result.get("title", "")).startswith("seen ")
    assert caplog.text.count("StateObserver.abefore_model failed and was skipped") == 3
    use_config(
        _config(tmp_path, [{"kind": "StateObserver", "placement": "STANDARD", "mode": "update"}])
    )
    graph = build_lead_agent(get_settings(), {})
    result = await graph.ainvoke({"messages": [HumanMessage("go")]})
    assert result["title"] == "seen 5 messages"  # a returned dict is a state update


def test_sync_invocation_uses_the_supplied_pass_through(tmp_path: Path, use_config: Any) -> None:
    path = write_config(
        tmp_path,
        SCRIPT,
        tools=[
            {"name": "counted", "use": "tests.deerflow_extension_api.test_plugins:sync_counted"}
        ],
        plugins=_plugin([{"kind": "AsyncOnlyToolObserver", "placement": "TOOL_VISIBLE"}]),
    )
    use_config(path)
    EXECUTIONS.clear()
    graph = build_lead_agent(get_settings(), {})
    result = graph.invoke({"messages": [HumanMessage("go")]})
    assert result["messages"][-1].content == "done"
    assert EXECUTIONS == ["one", "two"]


async def test_build_context_honours_the_run_override_and_names_subagents(
    tmp_path: Path, use_config: Any
) -> None:
    """Issue 19.6: max_subagents_per_run is the run's clamped override; subagents are named."""
    use_config(_config(tmp_path, [{"kind": "StateObserver", "placement": "STANDARD"}]))
    build_lead_agent(get_settings(), {"configurable": {"max_total_subagents": 3}})
    recorder = _recorder()
    assert recorder.contexts[-1].policy.max_subagents_per_run == 3
    build_lead_agent(get_settings(), {"configurable": {"max_total_subagents": 500}})
    assert recorder.contexts[-1].policy.max_subagents_per_run == 50  # clamped 1-50
    build_subagent(get_settings(), {"configurable": {"subagent_type": "general-purpose"}})
    assert recorder.contexts[-1].scope is AgentScope.SUBAGENT
    assert recorder.contexts[-1].agent_name == "general-purpose"
    build_subagent(get_settings(), {})
    assert recorder.contexts[-1].agent_name == "subagent"
