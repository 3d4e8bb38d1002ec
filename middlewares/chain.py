"""Assembly of the middleware chain, in the spec's order (000, "Assembly order").

The order is a runtime contract (003, "order itself is a runtime contract"):
``before_*`` hooks run in list order, ``after_*`` in reverse, and ``wrap_*``
hooks nest with the first entry outermost. This module is the one place that
encodes that order and the conditions of every entry:

- ``BASE_SLOTS`` (1-16): the shared runtime base, ``build_lead_runtime_middlewares``.
- ``LEAD_SLOTS`` (17-34): the lead-only segment; then custom middlewares (35),
  configured extension middlewares (36) and ``LEAD_TAIL_SLOTS`` (37-40).
- ``SUBAGENT_SLOTS`` and ``SUBAGENT_TAIL_SLOTS``: the subagent chain reuses the
  base (minus lead-only Uploads), attaches DurableContext immediately before its
  summarization, shares the configured extensions before its safety tail, and
  ends with the date-only context right before SystemMessageCoalescing.

A slot fills only when its condition holds **and** ``FACTORIES`` has a factory
for it; a middleware that does not exist yet is simply absent and the order of
those that exist is already the spec's. **Adding a middleware is one line** in
``FACTORIES`` (plus its import)::

    "ThreadDataMiddleware": lambda inputs: ThreadDataMiddleware(inputs.settings),  # 5

keyed by the slot's name. A factory may return None (absent this time) or
several instances (slot 11's two gates). Plugin contributions (spec 004) are
then placed at their anchors and the host's ordering invariants are checked.
``describe_chain`` returns the assembled chain with each entry's spec number
and origin, for tests and the ``/policies`` route.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware, TodoListMiddleware
from langchain_core.runnables import RunnableConfig

from deerflow_extension_api import AgentBuildContext, AgentScope, HostPolicySnapshot
from deerflow_extension_api._host import apply_contributions
from deerflow_extension_api._placement import StackEntry
from deerflow_extension_api._plugins import LoadedExtensions, load_extensions
from deerflow_extension_api._store import TaskStoreScope
from middlewares.artifact_capture import ArtifactCaptureMiddleware
from middlewares.artifact_resolution import ArtifactResolutionMiddleware
from middlewares.clarification import ClarificationMiddleware
from middlewares.dangling_tool_call import DanglingToolCallMiddleware
from middlewares.dynamic_context import DynamicContextMiddleware
from middlewares.input_sanitization import InputSanitizationMiddleware
from middlewares.llm_error_handling import LLMErrorHandlingMiddleware
from middlewares.loop_detection import LoopDetectionMiddleware
from middlewares.model_content_compatibility import ModelContentCompatibilityMiddleware
from middlewares.model_length_finish_reason import ModelLengthFinishReasonMiddleware
from middlewares.pii_redaction import PiiRedactionMiddleware
from middlewares.read_before_write import ReadBeforeWriteMiddleware
from middlewares.safety_finish_reason import SafetyFinishReasonMiddleware
from middlewares.sandbox import SandboxMiddleware
from middlewares.sandbox_audit import SandboxAuditMiddleware
from middlewares.subagent_limit import SubagentLimitMiddleware
from middlewares.system_message_coalescing import SystemMessageCoalescingMiddleware
from middlewares.terminal_response import TerminalResponseMiddleware
from middlewares.thread_data import ThreadDataMiddleware
from middlewares.title import TitleMiddleware
from middlewares.tool_error_handling import ToolErrorHandlingMiddleware
from middlewares.tool_output_budget import ToolOutputBudgetMiddleware
from middlewares.tool_receipt import ToolReceiptMiddleware
from middlewares.tool_result_sanitization import ToolResultSanitizationMiddleware
from middlewares.uploads import UploadsMiddleware
from middlewares.view_image import ViewImageMiddleware
from runtime.config import ConfigError, ModelConfig, Settings
from runtime.models import create_chat_model, resolve_model_name
from runtime.run_options import RunOptions, resolve_run_options
from subagents.limits import resolve_subagent_limits

__all__ = [
    "BASE_SLOTS",
    "FACTORIES",
    "LEAD_SLOTS",
    "LEAD_TAIL_SLOTS",
    "SUBAGENT_SLOTS",
    "SUBAGENT_TAIL_SLOTS",
    "ChainInputs",
    "ChainMember",
    "Slot",
    "build_lead_runtime_middlewares",
    "build_middlewares",
    "build_subagent_runtime_middlewares",
    "describe_chain",
]

Condition = Callable[["ChainInputs"], bool]
Factory = Callable[
    ["ChainInputs"], AgentMiddleware[Any, Any] | Sequence[AgentMiddleware[Any, Any]] | None
]


@dataclass(frozen=True)
class ChainInputs:
    """What assembly may depend on: config, the run's switches, its model and scope.

    This is the host-side build context; ``build_context()`` derives the
    extension-facing ``AgentBuildContext`` (spec 004) from it. ``scope`` is set
    by the builders, so a factory can tell the lead chain from a subagent's.
    """

    settings: Settings
    options: RunOptions
    model: ModelConfig
    effective: dict[str, Any] = field(default_factory=dict)
    scope: AgentScope = AgentScope.LEAD

    @classmethod
    def from_config(
        cls,
        settings: Settings,
        config: RunnableConfig | None,
        scope: AgentScope = AgentScope.LEAD,
    ) -> ChainInputs:
        """The inputs a run with ``config`` assembles its chain from (as graphs/_build.py does)."""
        options = resolve_run_options(config)
        model = resolve_model_name(settings, options.model_name).entry
        effective = options.effective(subagents_default=settings.subagents.enabled)
        return cls(
            settings=settings, options=options, model=model, effective=effective, scope=scope
        )

    def for_scope(self, scope: AgentScope) -> ChainInputs:
        return self if scope is self.scope else dataclasses.replace(self, scope=scope)

    def switch(self, key: str) -> bool:
        """An effective run switch (``is_plan_mode``, ``subagent_enabled``, ...)."""
        return bool(self.effective.get(key))

    def setting(self, section: str, key: str, default: Any = None) -> Any:
        """``settings.<section>.<key>``, or ``default`` while that section does not exist."""
        return getattr(getattr(self.settings, section, None), key, default)

    def policy(self) -> HostPolicySnapshot:
        budget_on = bool(self.setting("token_budget", "enabled", False))
        max_tokens = self.setting("token_budget", "max_tokens_per_run", None)
        subagents = None
        if self.scope is AgentScope.LEAD and self.switch("subagent_enabled"):
            subagents = self.setting("subagents", "max_total_per_run", 6)
        return HostPolicySnapshot(
            token_budget_enabled=budget_on,
            max_tokens_per_run=max_tokens if budget_on else None,
            max_subagents_per_run=subagents,
        )

    def build_context(self) -> AgentBuildContext:
        return AgentBuildContext(
            scope=self.scope,
            agent_name=self.options.agent_name,
            model_name=self.model.name,
            policy=self.policy(),
        )


@dataclass(frozen=True)
class Slot:
    """One entry of the spec's assembly order."""

    number: int
    """The spec's number (000); registration order is the table's row order."""
    name: str
    """The middleware's class name, which keys ``FACTORIES``."""
    when: Condition | None = None
    """The spec's condition; None means always."""
    lead_only: bool = False

    def applies(self, inputs: ChainInputs) -> bool:
        return self.when is None or bool(self.when(inputs))


@dataclass(frozen=True)
class ChainMember:
    """One assembled entry, for tests and self-description."""

    number: int | None
    name: str
    middleware: AgentMiddleware[Any, Any]
    kind: str = "builtin"
    origin: str | None = None


def _enabled(section: str, default: bool) -> Condition:
    def condition(inputs: ChainInputs) -> bool:
        return bool(inputs.setting(section, "enabled", default))

    condition.__name__ = f"{section}.enabled"
    return condition


def _plan_mode(inputs: ChainInputs) -> bool:
    return inputs.switch("is_plan_mode")


def _vision(inputs: ChainInputs) -> bool:
    return bool(inputs.model.supports_vision)


def _subagents(inputs: ChainInputs) -> bool:
    return inputs.switch("subagent_enabled")


def _receipts(inputs: ChainInputs) -> bool:
    return bool(inputs.setting("verification", "receipts_enabled", True))


def _gates(inputs: ChainInputs) -> bool:
    return bool(inputs.setting("authorization", "enabled", False)) or bool(
        inputs.setting("guardrails", "enabled", False)
    )


def _knowledge(inputs: ChainInputs) -> bool:
    return any(t.name == "knowledge_search" for t in (inputs.settings.tools or ()))


def _token_usage_and_budget(inputs: ChainInputs) -> bool:
    return bool(inputs.setting("token_usage", "enabled", False)) and bool(
        inputs.setting("token_budget", "enabled", False)
    )


# The shared runtime base (1-16), in registration order.
BASE_SLOTS: tuple[Slot, ...] = (
    Slot(1, "InputSanitizationMiddleware"),
    Slot(1, "KnowledgeScopeMiddleware", _knowledge),  # "follows input sanitization"
    Slot(2, "ToolOutputBudgetMiddleware", _enabled("tool_output", True)),
    Slot(3, "ToolResultSanitizationMiddleware"),
    Slot(4, "PiiRedactionMiddleware", _enabled("pii_redaction", False)),
    Slot(5, "ThreadDataMiddleware"),
    Slot(6, "UploadsMiddleware", lead_only=True),
    Slot(7, "SandboxMiddleware"),
    Slot(8, "DanglingToolCallMiddleware"),
    Slot(9, "LLMErrorHandlingMiddleware", _enabled("llm_error_handling", True)),
    Slot(10, "ArtifactResolutionMiddleware"),
    # Spec 15: the receipt layer is "the outermost wrap_tool_call layer -
    # registered ahead of authorization, audit, write and progress gates".
    Slot(15, "ToolReceiptMiddleware", _receipts),
    Slot(11, "GuardrailMiddleware", _gates),
    Slot(12, "SandboxAuditMiddleware"),
    Slot(13, "ReadBeforeWriteMiddleware", _enabled("read_before_write", True)),
    Slot(14, "ToolProgressMiddleware", _enabled("tool_progress", False)),
    Slot(15, "ToolErrorHandlingMiddleware"),
    Slot(16, "ArtifactCaptureMiddleware"),
)

# The lead-only segment (17-34).
LEAD_SLOTS: tuple[Slot, ...] = (
    Slot(17, "DynamicContextMiddleware"),
    Slot(18, "SkillActivationMiddleware"),
    Slot(19, "SkillToolPolicyMiddleware"),
    Slot(20, "DurableContextMiddleware"),
    Slot(21, "SummarizationMiddleware", _enabled("summarization", False)),
    Slot(22, "TodoListMiddleware", _plan_mode),
    Slot(23, "TokenUsageMiddleware", _enabled("token_usage", False)),
    Slot(24, "TitleMiddleware"),
    Slot(25, "MemoryMiddleware"),
    Slot(26, "ViewImageMiddleware", _vision),
    Slot(27, "McpRoutingMiddleware"),
    Slot(28, "DeferredToolPromotionAuditMiddleware"),
    Slot(29, "DeferredToolFilterMiddleware", _enabled("tool_search", False)),
    Slot(30, "SystemMessageCoalescingMiddleware"),
    Slot(31, "SubagentLimitMiddleware", _subagents),
    Slot(32, "LoopDetectionMiddleware", _enabled("loop_detection", True)),
    Slot(33, "TokenBudgetMiddleware", _enabled("token_budget", False)),
    # 33: "place CompletedSubagentUsageMiddleware after the guard".
    Slot(33, "CompletedSubagentUsageMiddleware", _token_usage_and_budget),
    Slot(34, "ModelContentCompatibilityMiddleware"),
)

# After custom (35) and configured extensions (36): the lead tail (37-40).
LEAD_TAIL_SLOTS: tuple[Slot, ...] = (
    Slot(37, "TerminalResponseMiddleware"),
    Slot(38, "ModelLengthFinishReasonMiddleware"),
    Slot(39, "SafetyFinishReasonMiddleware", _enabled("safety_finish_reason", False)),
    Slot(40, "ClarificationMiddleware"),  # must be last
)

# The subagent segment after the base: DurableContext "immediately before
# subagent summarization", the loop/token guards, the read-time sanitizer.
SUBAGENT_SLOTS: tuple[Slot, ...] = (
    Slot(20, "DurableContextMiddleware"),
    Slot(21, "SummarizationMiddleware", _enabled("summarization", False)),
    Slot(32, "LoopDetectionMiddleware", _enabled("loop_detection", True)),
    Slot(33, "TokenBudgetMiddleware", _enabled("token_budget", False)),
    Slot(34, "ModelContentCompatibilityMiddleware"),
)

# After the shared extensions (36): the safety tail, then the date-only context
# "immediately before" the coalescer, which is the subagent chain's last entry.
SUBAGENT_TAIL_SLOTS: tuple[Slot, ...] = (
    Slot(37, "TerminalResponseMiddleware"),
    Slot(38, "ModelLengthFinishReasonMiddleware"),
    Slot(39, "SafetyFinishReasonMiddleware", _enabled("safety_finish_reason", False)),
    Slot(17, "DynamicContextMiddleware"),  # date-only for subagents
    Slot(30, "SystemMessageCoalescingMiddleware"),
)


def _title(inputs: ChainInputs) -> AgentMiddleware[Any, Any] | None:
    config = inputs.settings.title
    if not config.enabled:
        return None
    model = None
    if config.model:
        entry = inputs.settings.model_by_name(config.model)
        if entry is None:
            raise ConfigError(f"title.model: no model named {config.model!r} in models")
        model = create_chat_model(entry)
    return TitleMiddleware(model=model, max_chars=config.max_chars)


def _llm_error_handling(inputs: ChainInputs) -> AgentMiddleware[Any, Any]:
    settings = inputs.settings
    return LLMErrorHandlingMiddleware.from_config(
        settings.llm_error_handling, inputs.model, scope=str(settings.data_root_path())
    )


# Factories of the middlewares that exist, keyed by slot name. One line each.
FACTORIES: dict[str, Factory] = {
    "InputSanitizationMiddleware": lambda i: InputSanitizationMiddleware(),  # 1
    "ToolOutputBudgetMiddleware": lambda i: ToolOutputBudgetMiddleware.from_settings(i.settings),
    "ToolResultSanitizationMiddleware": lambda i: ToolResultSanitizationMiddleware(),  # 3
    "PiiRedactionMiddleware": lambda i: PiiRedactionMiddleware.from_config(
        i.settings.pii_redaction
    ),
    "ThreadDataMiddleware": lambda i: ThreadDataMiddleware(i.settings),  # 5
    "UploadsMiddleware": lambda i: UploadsMiddleware(i.settings),  # 6
    "SandboxMiddleware": lambda i: SandboxMiddleware(i.settings),  # 7
    "DanglingToolCallMiddleware": lambda i: DanglingToolCallMiddleware(),  # 8
    "LLMErrorHandlingMiddleware": _llm_error_handling,  # 9
    "ArtifactResolutionMiddleware": lambda i: ArtifactResolutionMiddleware(),  # 10
    "ToolReceiptMiddleware": lambda i: ToolReceiptMiddleware.from_config(i.settings.verification),
    "SandboxAuditMiddleware": lambda i: SandboxAuditMiddleware(),  # 12
    "ReadBeforeWriteMiddleware": lambda i: ReadBeforeWriteMiddleware.from_settings(i.settings),
    "ToolErrorHandlingMiddleware": lambda i: ToolErrorHandlingMiddleware(),  # 15
    "ArtifactCaptureMiddleware": lambda i: ArtifactCaptureMiddleware(i.settings),  # 16
    "SystemMessageCoalescingMiddleware": lambda i: SystemMessageCoalescingMiddleware(),  # 30
    "SubagentLimitMiddleware": lambda i: SubagentLimitMiddleware(  # 31
        resolve_subagent_limits(i.settings.subagents, i.options)
    ),
    "LoopDetectionMiddleware": lambda i: LoopDetectionMiddleware(  # 32
        **i.settings.loop_detection.model_dump(exclude={"enabled"})
    ),
    "ModelContentCompatibilityMiddleware": lambda i: ModelContentCompatibilityMiddleware(),  # 34
    "TerminalResponseMiddleware": lambda i: TerminalResponseMiddleware(),  # 37
    "ModelLengthFinishReasonMiddleware": lambda i: ModelLengthFinishReasonMiddleware(),  # 38
    "SafetyFinishReasonMiddleware": lambda i: SafetyFinishReasonMiddleware(  # 39
        i.settings.safety_finish_reason.finish_reasons
    ),
    # 17: the spec installs it always; here it is opt-in (dynamic_context.enabled)
    # until clients skip its hidden message in persisted history.
    "DynamicContextMiddleware": lambda i: (
        DynamicContextMiddleware() if i.settings.dynamic_context.enabled else None
    ),
    "TodoListMiddleware": lambda i: TodoListMiddleware(),  # 22 (plan mode)
    "TitleMiddleware": _title,  # 24
    "ViewImageMiddleware": lambda i: ViewImageMiddleware(i.settings),  # 26 (vision models)
    "ClarificationMiddleware": lambda i: ClarificationMiddleware(),  # 40
}


def _fill(slots: Sequence[Slot], inputs: ChainInputs) -> list[ChainMember]:
    members: list[ChainMember] = []
    for slot in slots:
        if slot.lead_only and inputs.scope is not AgentScope.LEAD:
            continue
        factory = FACTORIES.get(slot.name)
        if factory is None or not slot.applies(inputs):
            continue
        produced = factory(inputs)
        if produced is None:
            continue
        instances = [produced] if isinstance(produced, AgentMiddleware) else list(produced)
        members.extend(ChainMember(slot.number, m.name, m) for m in instances)
    return members


def _configured(loaded: LoadedExtensions) -> list[ChainMember]:
    members = []
    for entry in loaded.configured:
        instance = entry.instantiate()
        members.append(ChainMember(36, instance.name, instance, "configured", entry.label))
    return members


def _custom(custom: Sequence[AgentMiddleware[Any, Any]]) -> list[ChainMember]:
    return [
        ChainMember(35, m.name, m, "custom", f"custom_middlewares[{index}]")
        for index, m in enumerate(custom)
    ]


def _finish(
    members: list[ChainMember], inputs: ChainInputs, loaded: LoadedExtensions
) -> list[ChainMember]:
    """Place plugin contributions at their anchors and validate the final order."""
    stack = [StackEntry(m.middleware, m.origin, m.kind) for m in members]
    final = apply_contributions(
        stack, loaded=loaded, ctx=inputs.build_context(), task_scope=TaskStoreScope()
    )
    known = {id(m.middleware): m for m in members}
    return [
        known.get(id(mw))
        or ChainMember(36, mw.name, mw, "extension", getattr(mw, "entry_point", None))
        for mw in final
    ]


def describe_chain(
    inputs: ChainInputs,
    *,
    custom_middlewares: Sequence[AgentMiddleware[Any, Any]] = (),
    loaded: LoadedExtensions | None = None,
) -> list[ChainMember]:
    """The assembled chain of ``inputs.scope`` with each entry's number and origin."""
    loaded = loaded if loaded is not None else load_extensions(inputs.settings)
    if inputs.scope is AgentScope.LEAD:
        members = [
            *_fill(BASE_SLOTS, inputs),
            *_fill(LEAD_SLOTS, inputs),
            *_custom(custom_middlewares),
            *_configured(loaded),
            *_fill(LEAD_TAIL_SLOTS, inputs),
        ]
    else:
        members = [
            *_fill(BASE_SLOTS, inputs),
            *_fill(SUBAGENT_SLOTS, inputs),
            *_custom(custom_middlewares),
            *_configured(loaded),
            *_fill(SUBAGENT_TAIL_SLOTS, inputs),
        ]
    return _finish(members, inputs, loaded)


def build_lead_runtime_middlewares(inputs: ChainInputs) -> list[AgentMiddleware[Any, Any]]:
    """The shared runtime base (spec numbers 1-16) for ``inputs.scope``."""
    return [m.middleware for m in _fill(BASE_SLOTS, inputs)]


def build_subagent_runtime_middlewares(
    inputs: ChainInputs,
    *,
    custom_middlewares: Sequence[AgentMiddleware[Any, Any]] = (),
) -> list[AgentMiddleware[Any, Any]]:
    """The whole subagent chain: base, subagent segment, extensions, safety tail, coalescer."""
    members = describe_chain(
        inputs.for_scope(AgentScope.SUBAGENT), custom_middlewares=custom_middlewares
    )
    return [m.middleware for m in members]


def build_middlewares(
    inputs: ChainInputs,
    *,
    custom_middlewares: Sequence[AgentMiddleware[Any, Any]] = (),
) -> list[AgentMiddleware[Any, Any]]:
    """The lead chain: base, lead-only segment, custom, extensions, then the tail."""
    members = describe_chain(
        inputs.for_scope(AgentScope.LEAD), custom_middlewares=custom_middlewares
    )
    return [m.middleware for m in members]
