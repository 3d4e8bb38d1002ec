"""Assembly: the spec's order and conditions for the lead and subagent chains.

Two kinds of pins:

- With a probe factory for *every* slot, the full 40-entry order is pinned for
  the main config combinations. This proves the table (order and conditions)
  and stays true as real middlewares fill their slots.
- ``REAL_*`` pin what the real ``FACTORIES`` assemble today. They grow as
  middlewares land: update them when a middleware joins the chain.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage

import middlewares
from deerflow_extension_api import AgentScope
from graphs.lead_agent import build_lead_agent
from middlewares import chain
from middlewares.chain import (
    BASE_SLOTS,
    FACTORIES,
    LEAD_SLOTS,
    LEAD_TAIL_SLOTS,
    SUBAGENT_SLOTS,
    SUBAGENT_TAIL_SLOTS,
    ChainInputs,
    build_lead_runtime_middlewares,
    build_middlewares,
    build_subagent_runtime_middlewares,
    describe_chain,
)
from runtime.config import get_settings
from tests.support.chain_fixtures import ALL_SLOT_NAMES, inputs_for, probe_factories
from tests.support.probes import probe
from tests.support.scripted import ai_text, ai_tools, scripted_model_entry, tool_call, write_config

LEAD_DEFAULT = [
    "InputSanitizationMiddleware",
    "ToolOutputBudgetMiddleware",
    "ToolResultSanitizationMiddleware",
    "ThreadDataMiddleware",
    "UploadsMiddleware",
    "SandboxMiddleware",
    "DanglingToolCallMiddleware",
    "LLMErrorHandlingMiddleware",
    "ArtifactResolutionMiddleware",
    "ToolReceiptMiddleware",
    "SandboxAuditMiddleware",
    "ReadBeforeWriteMiddleware",
    "ToolErrorHandlingMiddleware",
    "ArtifactCaptureMiddleware",
    "DynamicContextMiddleware",
    "SkillActivationMiddleware",
    "SkillToolPolicyMiddleware",
    "DurableContextMiddleware",
    "TitleMiddleware",
    "MemoryMiddleware",
    "McpRoutingMiddleware",
    "DeferredToolPromotionAuditMiddleware",
    "SystemMessageCoalescingMiddleware",
    "SubagentLimitMiddleware",
    "LoopDetectionMiddleware",
    "ModelContentCompatibilityMiddleware",
    "TerminalResponseMiddleware",
    "ModelLengthFinishReasonMiddleware",
    "ClarificationMiddleware",
]
LEAD_DEFAULT_NUMBERS = [1, 2, 3, 5, 6, 7, 8, 9, 10, 15, 12, 13, 15, 16, 17, 18, 19, 20, 24, 25,
                        27, 28, 30, 31, 32, 34, 37, 38, 40]  # fmt: skip

SUBAGENT_DEFAULT = [
    "InputSanitizationMiddleware",
    "ToolOutputBudgetMiddleware",
    "ToolResultSanitizationMiddleware",
    "ThreadDataMiddleware",
    "SandboxMiddleware",
    "DanglingToolCallMiddleware",
    "LLMErrorHandlingMiddleware",
    "ArtifactResolutionMiddleware",
    "ToolReceiptMiddleware",
    "SandboxAuditMiddleware",
    "ReadBeforeWriteMiddleware",
    "ToolErrorHandlingMiddleware",
    "ArtifactCaptureMiddleware",
    "DurableContextMiddleware",
    "McpRoutingMiddleware",
    "DeferredToolPromotionAuditMiddleware",
    "LoopDetectionMiddleware",
    "ModelContentCompatibilityMiddleware",
    "TerminalResponseMiddleware",
    "ModelLengthFinishReasonMiddleware",
    "DynamicContextMiddleware",
    "SystemMessageCoalescingMiddleware",
]

# What the real factories assemble today (see the module docstring).
REAL_LEAD_DEFAULT: list[str] = [
    "InputSanitizationMiddleware",
    "ToolOutputBudgetMiddleware",
    "ToolResultSanitizationMiddleware",
    "ThreadDataMiddleware",
    "UploadsMiddleware",
    "SandboxMiddleware",
    "DanglingToolCallMiddleware",
    "LLMErrorHandlingMiddleware",
    "ArtifactResolutionMiddleware",
    "ToolReceiptMiddleware",
    "SandboxAuditMiddleware",
    "ReadBeforeWriteMiddleware",
    "ToolErrorHandlingMiddleware",
    "ArtifactCaptureMiddleware",
    "DynamicContextMiddleware",  # always installed (issue 19.5)
    "SkillActivationMiddleware",  # skills are on by default
    "SkillToolPolicyMiddleware",
    "DurableContextMiddleware",  # 20: always installed
    "TitleMiddleware",
    "SystemMessageCoalescingMiddleware",
    "SubagentLimitMiddleware",  # subagents are on by default
    "LoopDetectionMiddleware",
    "ModelContentCompatibilityMiddleware",
    "TerminalResponseMiddleware",
    "ModelLengthFinishReasonMiddleware",
    "ClarificationMiddleware",  # always last
]
REAL_SUBAGENT_DEFAULT: list[str] = [
    *(
        name  # the runtime base without the lead-only Uploads
        for name in REAL_LEAD_DEFAULT[: REAL_LEAD_DEFAULT.index("ArtifactCaptureMiddleware") + 1]
        if name != "UploadsMiddleware"
    ),
    "DurableContextMiddleware",  # immediately before subagent summarization
    "LoopDetectionMiddleware",
    "ModelContentCompatibilityMiddleware",
    "TerminalResponseMiddleware",
    "ModelLengthFinishReasonMiddleware",
    "DynamicContextMiddleware",  # date-only, right before the coalescer
    "SystemMessageCoalescingMiddleware",  # the subagent chain's last entry
]


def _names(inputs: ChainInputs, **kwargs: Any) -> list[str]:
    return [m.name for m in describe_chain(inputs, **kwargs)]


@pytest.fixture
def all_probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    log: list[str] = []
    monkeypatch.setattr(chain, "FACTORIES", probe_factories(log))
    return log


def test_lead_default_order(all_probes: list[str], tmp_path: Path) -> None:
    inputs = inputs_for(tmp_path)
    members = describe_chain(inputs)
    assert [m.name for m in members] == LEAD_DEFAULT
    assert [m.number for m in members] == LEAD_DEFAULT_NUMBERS
    assert [m.name for m in build_middlewares(inputs)] == LEAD_DEFAULT


def test_plan_mode_adds_todo_after_durable_context(all_probes: list[str], tmp_path: Path) -> None:
    names = _names(inputs_for(tmp_path, configurable={"is_plan_mode": True}))
    expected = list(LEAD_DEFAULT)
    expected.insert(expected.index("TitleMiddleware"), "TodoListMiddleware")
    assert names == expected


def test_subagents_off_drops_the_subagent_limit(all_probes: list[str], tmp_path: Path) -> None:
    names = _names(inputs_for(tmp_path, configurable={"subagent_enabled": False}))
    assert names == [n for n in LEAD_DEFAULT if n != "SubagentLimitMiddleware"]
    names = _names(inputs_for(tmp_path, subagents={"enabled": False}))
    assert "SubagentLimitMiddleware" not in names


def test_vision_model_adds_view_image_after_memory(all_probes: list[str], tmp_path: Path) -> None:
    models = [scripted_model_entry([ai_text("hi")], supports_vision=True)]
    names = _names(inputs_for(tmp_path, models=models))
    expected = list(LEAD_DEFAULT)
    expected.insert(expected.index("MemoryMiddleware") + 1, "ViewImageMiddleware")
    assert names == expected


def test_all_switches_on(all_probes: list[str], tmp_path: Path) -> None:
    inputs = inputs_for(tmp_path, configurable={"is_plan_mode": True})
    switches = {
        name: SimpleNamespace(enabled=True)
        for name in (
            "pii_redaction",
            "tool_progress",
            "summarization",
            "token_usage",
            "tool_search",
            "token_budget",
            "safety_finish_reason",
            "authorization",
        )
    }
    fields = {k: getattr(inputs.settings, k) for k in type(inputs.settings).model_fields}
    settings = SimpleNamespace(**{**fields, **switches})
    settings.tools = [SimpleNamespace(name="knowledge_search")]
    models = inputs.model.model_copy(update={"supports_vision": True})
    full = ChainInputs(settings, inputs.options, models, inputs.effective)  # type: ignore[arg-type]
    members = describe_chain(full)
    names = [m.name for m in members]
    lead_slots = [s.name for s in (*BASE_SLOTS, *LEAD_SLOTS, *LEAD_TAIL_SLOTS)]
    assert names == lead_slots  # every slot filled, in table order
    numbers = [m.number or 0 for m in members]
    receipt = names.index("ToolReceiptMiddleware")
    assert numbers[receipt] == 15 and numbers[receipt + 1] == 11  # receipt is outer of the gates
    without_receipt = numbers[:receipt] + numbers[receipt + 1 :]
    assert without_receipt == sorted(without_receipt)
    sub = describe_chain(full.for_scope(AgentScope.SUBAGENT))
    assert [m.name for m in sub] == [
        *[s.name for s in BASE_SLOTS if not s.lead_only],
        *[s.name for s in SUBAGENT_SLOTS],
        *[s.name for s in SUBAGENT_TAIL_SLOTS],
    ]


def test_subagent_default_order(all_probes: list[str], tmp_path: Path) -> None:
    inputs = inputs_for(tmp_path)
    names = [m.name for m in build_subagent_runtime_middlewares(inputs)]
    assert names == SUBAGENT_DEFAULT
    base = [m.name for m in build_lead_runtime_middlewares(inputs)]
    assert base == LEAD_DEFAULT[: LEAD_DEFAULT.index("ArtifactCaptureMiddleware") + 1]


def test_custom_and_configured_extensions_sit_before_the_tail(
    all_probes: list[str], tmp_path: Path
) -> None:
    log: list[str] = []
    custom = [probe("CustomOne", log), probe("CustomTwo", log)]
    inputs = inputs_for(
        tmp_path,
        extensions={"middlewares": ["tests.support.demo_extension:ConfiguredAudit"]},
    )
    members = describe_chain(inputs, custom_middlewares=custom)
    names = [m.name for m in members]
    tail = names[names.index("ModelContentCompatibilityMiddleware") + 1 :]
    assert tail == [
        "CustomOne",
        "CustomTwo",
        "ConfiguredAudit",
        "TerminalResponseMiddleware",
        "ModelLengthFinishReasonMiddleware",
        "ClarificationMiddleware",
    ]
    assert [m.kind for m in members if m.number in (35, 36)] == ["custom", "custom", "configured"]
    sub = [m.name for m in describe_chain(inputs.for_scope(AgentScope.SUBAGENT))]
    assert sub[sub.index("ModelContentCompatibilityMiddleware") + 1 :] == [
        "ConfiguredAudit",
        "TerminalResponseMiddleware",
        "ModelLengthFinishReasonMiddleware",
        "DynamicContextMiddleware",
        "SystemMessageCoalescingMiddleware",
    ]


def test_real_chain_today(tmp_path: Path) -> None:
    inputs = inputs_for(tmp_path)
    assert [m.name for m in build_middlewares(inputs)] == REAL_LEAD_DEFAULT
    assert [m.name for m in build_subagent_runtime_middlewares(inputs)] == REAL_SUBAGENT_DEFAULT


def test_every_factory_fills_a_slot_and_produces_its_class(tmp_path: Path) -> None:
    assert set(FACTORIES) <= set(ALL_SLOT_NAMES)
    inputs = inputs_for(tmp_path)
    for name, factory in FACTORIES.items():
        produced = factory(inputs)
        instances = [produced] if isinstance(produced, AgentMiddleware) else list(produced or ())
        assert all(type(m).__name__ == name for m in instances), name


def test_no_middleware_module_is_left_out_of_the_chain() -> None:
    """A middleware class in ``middlewares/`` must have a factory (else it never runs)."""
    missing = []
    for info in pkgutil.iter_modules(middlewares.__path__):
        if info.name.startswith("_") or info.name in {"chain", "release_policy"}:
            continue
        module = importlib.import_module(f"middlewares.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, AgentMiddleware)
                and cls.__module__ == module.__name__
                and not cls.__name__.startswith("_")
                and cls.__name__ in ALL_SLOT_NAMES
                and cls.__name__ not in FACTORIES
            ):
                missing.append(cls.__name__)
    assert missing == []


def test_slot_tables_are_in_spec_order() -> None:
    for table in (LEAD_SLOTS, LEAD_TAIL_SLOTS, SUBAGENT_SLOTS):
        numbers = [s.number for s in table]
        assert numbers == sorted(numbers)
    base = [s.number for s in BASE_SLOTS if s.name != "ToolReceiptMiddleware"]
    assert base == sorted(base)
    assert [s.name for s in SUBAGENT_TAIL_SLOTS][-1] == "SystemMessageCoalescingMiddleware"
    assert [s.name for s in LEAD_TAIL_SLOTS][-1] == "ClarificationMiddleware"


async def test_compiled_graph_fires_hooks_in_the_documented_directions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, use_config: Any
) -> None:
    log: list[str] = []
    factories = probe_factories(log)
    keep = ("ThreadDataMiddleware", "LLMErrorHandlingMiddleware", "ToolErrorHandlingMiddleware")
    monkeypatch.setattr(chain, "FACTORIES", {k: factories[k] for k in keep})
    script = [ai_tools(tool_call("echo", text="x")), ai_text("done")]
    use_config(
        write_config(tmp_path, script, tools=[{"name": "echo", "use": "tests.support.tools:echo"}])
    )
    graph = build_lead_agent(get_settings(), {"configurable": {"thread_id": "t"}})
    result = await graph.ainvoke({"messages": [HumanMessage("go")]})
    assert result["messages"][-1].content == "done"
    first_step = log[: log.index("ThreadDataMiddleware.after_model") + 3]
    assert first_step == [
        "ThreadDataMiddleware.before_model",
        "LLMErrorHandlingMiddleware.before_model",
        "ToolErrorHandlingMiddleware.before_model",
        "LLMErrorHandlingMiddleware.wrap_model_call:in",
        "LLMErrorHandlingMiddleware.wrap_model_call:out",
        "ToolErrorHandlingMiddleware.after_model",
        "LLMErrorHandlingMiddleware.after_model",
        "ThreadDataMiddleware.after_model",
        "ToolErrorHandlingMiddleware.wrap_tool_call:in[call_0_0]",
        "ToolErrorHandlingMiddleware.wrap_tool_call:out[call_0_0]",
    ]


def test_real_chains_with_every_optional_middleware_on(tmp_path: Path) -> None:
    """The real assembled chains the scenario suite's ``all_optional`` profile runs."""
    from tests.support.scenarios import ALL_OPTIONAL

    inputs = inputs_for(tmp_path, configurable={"is_plan_mode": True}, **ALL_OPTIONAL)
    lead = [m.name for m in build_middlewares(inputs)]
    optional = {
        "PiiRedactionMiddleware": "ToolResultSanitizationMiddleware",
        "GuardrailMiddleware": "ToolReceiptMiddleware",  # 11, inside the receipt layer
        "ToolProgressMiddleware": "ReadBeforeWriteMiddleware",  # 14, outside error handling
        "TodoListMiddleware": "DurableContextMiddleware",
        "TokenUsageMiddleware": "TodoListMiddleware",  # 23
        "TokenBudgetMiddleware": "LoopDetectionMiddleware",  # 33, then its backfill
        "CompletedSubagentUsageMiddleware": "TokenBudgetMiddleware",
        "SafetyFinishReasonMiddleware": "ModelLengthFinishReasonMiddleware",
    }
    for name, after in optional.items():
        assert lead.index(name) == lead.index(after) + 1, name
    assert [n for n in lead if n not in optional] == REAL_LEAD_DEFAULT
    sub = [m.name for m in build_subagent_runtime_middlewares(inputs)]
    assert [n for n in sub if n not in optional] == REAL_SUBAGENT_DEFAULT
    assert sub[-3:] == [
        "SafetyFinishReasonMiddleware",
        "DynamicContextMiddleware",
        "SystemMessageCoalescingMiddleware",
    ]


DEFERRAL = [
    "McpRoutingMiddleware",
    "DeferredToolPromotionAuditMiddleware",
    "DeferredToolFilterMiddleware",
]


def test_tool_search_defers_tools_in_subagents_as_in_the_lead(tmp_path: Path) -> None:
    """Spec 27-29 with ``tool_search.enabled``: the subagent chain defers too (28 audits
    "per lead run or subagent execution"), right after its DurableContext/summarization."""
    on = inputs_for(tmp_path, tool_search={"enabled": True}, summarization={"enabled": True})
    lead = [m.name for m in build_middlewares(on)]
    sub = [m.name for m in build_subagent_runtime_middlewares(on)]
    assert lead[lead.index("McpRoutingMiddleware") :][:3] == DEFERRAL
    start = sub.index("SummarizationMiddleware")
    assert sub[start - 1 : start + 5] == [
        "DurableContextMiddleware",
        "SummarizationMiddleware",
        *DEFERRAL,
        "LoopDetectionMiddleware",
    ]
    off = inputs_for(tmp_path)
    for chain_names in (
        [m.name for m in build_middlewares(off)],
        [m.name for m in build_subagent_runtime_middlewares(off)],
    ):
        assert not set(DEFERRAL) & set(chain_names)


def test_routing_looks_only_at_the_agents_own_deferred_tools(tmp_path: Path) -> None:
    from langchain_core.tools import tool

    from middlewares.mcp_routing import McpRoutingMiddleware

    @tool
    def get_forecast(city: str) -> str:
        """The weather forecast."""
        return city

    mine = get_forecast.model_copy(update={"metadata": {"deferred": True}})
    # web_fetch is deferred in config but not one of this agent's tools.
    configured = inputs_for(
        tmp_path,
        tool_search={"enabled": True},
        tools=[{"name": "web_fetch", "use": "tools.web:web_fetch", "deferred": True}],
    )
    inputs = dataclasses.replace(configured, deferred_tools=(mine,))
    router = next(
        m for m in build_subagent_runtime_middlewares(inputs) if isinstance(m, McpRoutingMiddleware)
    )
    state = {"messages": [HumanMessage("use get_forecast and web_fetch")]}
    update = router.before_agent(state, None)  # type: ignore[arg-type]
    assert update is not None and list(update["promoted"]) == ["get_forecast"]
