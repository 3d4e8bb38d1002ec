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
  summarization, defers tools like the lead (27-29, with ``tool_search.enabled``:
  spec 28 audits "per lead run or subagent execution"), shares the configured
  extensions before its safety tail, and ends with the date-only context right
  before SystemMessageCoalescing.

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
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from authz.setup import authorizer_for, guardrail_for
from deerflow_extension_api import AgentBuildContext, AgentScope, HostPolicySnapshot
from deerflow_extension_api.host import (
    LoadedExtensions,
    StackEntry,
    TaskStoreScope,
    apply_contributions,
    load_extensions,
)
from memory.queue import get_memory_queue
from memory.recall import MemoryRecall
from middlewares._skills import SkillChannel
from middlewares.artifact_capture import ArtifactCaptureMiddleware
from middlewares.artifact_resolution import ArtifactResolutionMiddleware
from middlewares.clarification import ClarificationMiddleware
from middlewares.completed_subagent_usage import CompletedSubagentUsageMiddleware
from middlewares.dangling_tool_call import DanglingToolCallMiddleware
from middlewares.deferred_tool_filter import DeferredToolFilterMiddleware
from middlewares.deferred_tool_promotion_audit import DeferredToolPromotionAuditMiddleware
from middlewares.durable_context import DurableContextMiddleware
from middlewares.dynamic_context import DynamicContextMiddleware
from middlewares.guardrail import GuardrailMiddleware
from middlewares.input_sanitization import InputSanitizationMiddleware
from middlewares.llm_error_handling import LLMErrorHandlingMiddleware
from middlewares.loop_detection import LoopDetectionMiddleware
from middlewares.mcp_routing import McpRoutingMiddleware
from middlewares.memory import MemoryMiddleware
from middlewares.model_content_compatibility import ModelContentCompatibilityMiddleware
from middlewares.model_length_finish_reason import ModelLengthFinishReasonMiddleware
from middlewares.pii_redaction import PiiRedactionMiddleware, PiiRedactor
from middlewares.read_before_write import ReadBeforeWriteMiddleware
from middlewares.safety_finish_reason import SafetyFinishReasonMiddleware
from middlewares.sandbox import SandboxMiddleware
from middlewares.sandbox_audit import SandboxAuditMiddleware
from middlewares.skill_activation import SkillActivationMiddleware
from middlewares.skill_tool_policy import SkillToolPolicyMiddleware
from middlewares.subagent_limit import SubagentLimitMiddleware
from middlewares.summarization import SummarizationMiddleware
from middlewares.system_message_coalescing import SystemMessageCoalescingMiddleware
from middlewares.terminal_response import TerminalResponseMiddleware
from middlewares.thread_data import ThreadDataMiddleware
from middlewares.title import TitleMiddleware
from middlewares.todo_list import TodoListMiddleware
from middlewares.token_budget import TokenBudgetMiddleware
from middlewares.token_usage import TokenUsageMiddleware
from middlewares.tool_error_handling import ToolErrorHandlingMiddleware
from middlewares.tool_output_budget import ToolOutputBudgetMiddleware
from middlewares.tool_progress import ToolProgressMiddleware
from middlewares.tool_receipt import ToolReceiptMiddleware
from middlewares.tool_result_sanitization import ToolResultSanitizationMiddleware
from middlewares.uploads import UploadsMiddleware
from middlewares.view_image import ViewImageMiddleware
from runtime.config import ConfigError, ModelConfig, Settings
from runtime.models import create_chat_model, resolve_model_name
from runtime.run_options import RunOptions, merged_run_config, resolve_run_options
from runtime.skills import SkillRegistry, get_skill_registry, run_skill_allowlist
from subagents.limits import resolve_subagent_limits

logger = logging.getLogger(__name__)

__all__ = [
    "BASE_SLOTS",
    "FACTORIES",
    "LEAD_SLOTS",
    "LEAD_TAIL_SLOTS",
    "PENDING_SECTIONS",
    "SUBAGENT_SLOTS",
    "SUBAGENT_TAIL_SLOTS",
    "ChainInputs",
    "ChainMember",
    "Slot",
    "build_lead_runtime_middlewares",
    "build_middlewares",
    "build_subagent_runtime_middlewares",
    "describe_chain",
    "subagent_type_of",
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
    subagent_type: str | None = None
    """The delegated run's type (``configurable.subagent_type``), for subagent builds."""
    deferred_tools: tuple[BaseTool, ...] | None = None
    """The agent's own deferred tools, when the builder knows them (McpRouting
    routes among these); None: every deferred tool the config has."""

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
            settings=settings,
            options=options,
            model=model,
            effective=effective,
            scope=scope,
            subagent_type=subagent_type_of(config),
        )

    def for_scope(self, scope: AgentScope) -> ChainInputs:
        return self if scope is self.scope else dataclasses.replace(self, scope=scope)

    def switch(self, key: str) -> bool:
        """An effective run switch (``is_plan_mode``, ``subagent_enabled``, ...)."""
        return bool(self.effective.get(key))

    def setting(self, section: str, key: str, default: Any = None) -> Any:
        """``settings.<section>.<key>``, typed: a misspelled section or key is a
        ``ConfigError``, never a silent default. ``default`` applies only to the
        spec's sections that have no config yet (``PENDING_SECTIONS``)."""
        return _typed_setting(self.settings, section, key, default)

    def policy(self) -> HostPolicySnapshot:
        budget_on = bool(self.setting("token_budget", "enabled", False))
        max_tokens = self.setting("token_budget", "max_tokens_per_run", None)
        subagents = None
        if self.scope is AgentScope.LEAD and self.switch("subagent_enabled"):
            # The run's override and the clamp, as SubagentLimit enforces it (spec 31).
            limits = resolve_subagent_limits(self.settings.subagents, self.options)
            subagents = limits.max_total_per_run
        return HostPolicySnapshot(
            token_budget_enabled=budget_on,
            max_tokens_per_run=max_tokens if budget_on else None,
            max_subagents_per_run=subagents,
        )

    def build_context(self) -> AgentBuildContext:
        agent_name = self.options.agent_name
        if self.scope is AgentScope.SUBAGENT:
            # A subagent is named by its type (the run's ``subagent_type``), spec 004.
            agent_name = self.subagent_type or agent_name or "subagent"
        return AgentBuildContext(
            scope=self.scope,
            agent_name=agent_name,
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


def subagent_type_of(config: RunnableConfig | None) -> str | None:
    """The delegated run's ``subagent_type`` (set by the executor), or None."""
    value = merged_run_config(config).get("subagent_type")
    return value if isinstance(value, str) and value else None


PENDING_SECTIONS: frozenset[str] = frozenset()
"""Config sections the spec's chain names but ``Settings`` does not declare yet:
their slots read the given default until the section lands."""


def _known_section(section: str) -> bool:
    return section in Settings.model_fields or section in PENDING_SECTIONS


def _typed_setting(settings: Settings, section: str, key: str, default: Any) -> Any:
    if not _known_section(section):
        raise ConfigError(f"chain: no config section {section!r} in Settings")
    value = getattr(settings, section, None)
    if value is None:  # a pending section (not configurable yet)
        return default
    fields = getattr(type(value), "model_fields", None)
    if fields is not None and key not in fields:
        raise ConfigError(f"chain: config section {section!r} has no key {key!r}")
    return getattr(value, key, default)


def _enabled(section: str, default: bool) -> Condition:
    if not _known_section(section):  # a typo fails at import, not as a silent default
        raise ConfigError(f"chain: no config section {section!r} in Settings")

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
    # A subagent defers tools like the lead: its own tool_search, its own
    # promotions (a fresh ``promoted``), audited per subagent execution (28).
    Slot(27, "McpRoutingMiddleware"),
    Slot(28, "DeferredToolPromotionAuditMiddleware"),
    Slot(29, "DeferredToolFilterMiddleware", _enabled("tool_search", False)),
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
    redactor = None
    pii = inputs.settings.pii_redaction
    if pii.enabled:  # spec 4: title input goes through redact_text
        redactor = PiiRedactor(pii.detectors, hash_key=pii.hash_key)
    return TitleMiddleware(model=model, max_chars=config.max_chars, redactor=redactor)


def _guardrail(inputs: ChainInputs) -> AgentMiddleware[Any, Any] | None:
    authorizer = authorizer_for(inputs.settings)
    guardrail = guardrail_for(inputs.settings)
    if authorizer is None and guardrail is None:
        return None
    return GuardrailMiddleware(authorizer=authorizer, guardrail=guardrail)


def _memory_on(inputs: ChainInputs) -> bool:
    """Memory is configured on and this run did not opt out (``memory_enabled: false``)."""
    return inputs.settings.memory.enabled and inputs.options.memory_enabled is not False


def _dynamic_context(inputs: ChainInputs) -> AgentMiddleware[Any, Any] | None:
    memory = inputs.settings.memory
    recall = None
    if _memory_on(inputs) and inputs.scope is AgentScope.LEAD and memory.recall_limit > 0:
        recall = MemoryRecall(
            limit=memory.recall_limit,
            max_chars=memory.recall_max_chars,
            semantic=memory.embeddings is not None,
            timeout=memory.recall_timeout_seconds,
        )
    if not inputs.settings.dynamic_context.enabled and recall is None:
        return None
    return DynamicContextMiddleware(
        date_only_system=inputs.scope is not AgentScope.LEAD, memory=recall
    )


def _memory(inputs: ChainInputs) -> AgentMiddleware[Any, Any] | None:
    settings = inputs.settings
    config = settings.memory
    if not _memory_on(inputs) or config.mode != "auto":
        return None
    entry = inputs.model
    if config.model:
        found = settings.model_by_name(config.model)
        if found is None:
            raise ConfigError(f"memory.model: no model named {config.model!r} in models")
        entry = found
    redact = None
    if settings.pii_redaction.enabled:
        redactor = PiiRedactor(
            settings.pii_redaction.detectors, hash_key=settings.pii_redaction.hash_key
        )
        redact = redactor.redact
    get_memory_queue().configure(
        debounce_seconds=config.debounce_seconds, max_pending=config.max_queue
    )
    return MemoryMiddleware(
        model_factory=lambda: create_chat_model(entry),
        max_memory_chars=config.max_memory_chars,
        max_memories=config.max_memories_per_user,
        indexed=config.embeddings is not None,
        redact=redact,
        extraction_timeout=config.extraction_timeout_seconds,
    )


def _summarization(inputs: ChainInputs) -> AgentMiddleware[Any, Any]:
    """21: the trigger and kept tail are fractions of the *run model's* window."""
    config = inputs.settings.summarization
    window = inputs.model.context_window or config.fallback_context_window
    trigger = config.trigger_tokens or max(2, int(window * config.trigger_fraction))
    keep = config.keep_tokens or max(1, int(window * config.keep_fraction))
    summary_model = None
    if config.model:
        entry = inputs.settings.model_by_name(config.model)
        if entry is None:
            raise ConfigError(f"summarization.model: no model named {config.model!r} in models")
        summary_model = create_chat_model(entry)
    return SummarizationMiddleware(
        model=summary_model or create_chat_model(inputs.model),
        summary_model=summary_model,
        trigger_tokens=trigger,
        keep_tokens=min(keep, trigger - 1),
        trim_tokens_to_summarize=config.trim_tokens_to_summarize,
        skills_path_prefix=config.skills_path_prefix,
        preserve_recent_skill_count=config.preserve_recent_skill_count,
        preserve_recent_skill_tokens=config.preserve_recent_skill_tokens,
        preserve_recent_skill_tokens_per_skill=config.preserve_recent_skill_tokens_per_skill,
        redact_pii=inputs.settings.pii_redaction.enabled,
    )


def _token_budget(inputs: ChainInputs) -> AgentMiddleware[Any, Any] | None:
    config = inputs.settings.token_budget
    limit = config.max_tokens_per_run
    if inputs.scope is not AgentScope.LEAD:
        limit = config.subagent_max_tokens_per_run or limit
    if not limit:
        return None
    # TokenUsage (23) is lead-only: a subagent's budget keeps its own running total.
    tracked = inputs.scope is AgentScope.LEAD and bool(inputs.settings.token_usage.enabled)
    return TokenBudgetMiddleware(max_tokens_per_run=limit, usage_tracked=tracked)


def _tool_search_on(inputs: ChainInputs) -> bool:
    return inputs.settings.tool_search.enabled


def _mcp_routing(inputs: ChainInputs) -> AgentMiddleware[Any, Any] | None:
    if not _tool_search_on(inputs):
        return None
    from tools.selection import deferred_catalog

    if inputs.deferred_tools is not None:
        own = list(inputs.deferred_tools)
        return McpRoutingMiddleware(catalog=lambda: own)
    settings = inputs.settings
    return McpRoutingMiddleware(catalog=lambda: deferred_catalog(settings))


def _llm_error_handling(inputs: ChainInputs) -> AgentMiddleware[Any, Any]:
    settings = inputs.settings
    return LLMErrorHandlingMiddleware.from_config(
        settings.llm_error_handling, inputs.model, scope=str(settings.data_root_path())
    )


def _skills(inputs: ChainInputs) -> tuple[SkillRegistry | None, frozenset[str] | None]:
    """The registry (None if it failed to load: 18/19 then fail closed) and the allowlist."""
    try:
        registry: SkillRegistry | None = get_skill_registry(inputs.settings)
    except Exception:  # a broken skills folder must not stop the agent; 18/19 fail closed
        logger.exception("skills could not be loaded; activation and skill tools fail closed")
        registry = None
    subagent = inputs.scope is not AgentScope.LEAD
    return registry, run_skill_allowlist(inputs.settings, inputs.options, subagent=subagent)


def _skill_middleware(cls: type[Any]) -> Factory:
    def factory(inputs: ChainInputs) -> AgentMiddleware[Any, Any] | None:
        if not inputs.settings.skills.enabled:
            return None
        registry, allowlist = _skills(inputs)
        return cls(registry=registry, allowlist=allowlist, channel=SkillChannel.shared())  # type: ignore[no-any-return]

    return factory


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
    "SandboxMiddleware": lambda i: SandboxMiddleware(  # 7
        i.settings, authorizer=authorizer_for(i.settings)
    ),
    "DanglingToolCallMiddleware": lambda i: DanglingToolCallMiddleware(),  # 8
    "LLMErrorHandlingMiddleware": _llm_error_handling,  # 9
    "ArtifactResolutionMiddleware": lambda i: ArtifactResolutionMiddleware(),  # 10
    "ToolReceiptMiddleware": lambda i: ToolReceiptMiddleware.from_config(i.settings.verification),
    "GuardrailMiddleware": _guardrail,  # 11
    "SandboxAuditMiddleware": lambda i: SandboxAuditMiddleware(),  # 12
    "ReadBeforeWriteMiddleware": lambda i: ReadBeforeWriteMiddleware.from_settings(i.settings),
    "ToolProgressMiddleware": lambda i: ToolProgressMiddleware(  # 14
        retryable_failures_to_block=i.settings.tool_progress.retryable_failures_to_block
    ),
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
    # 17: always installed (request-only, never persisted); date-only system
    # context for subagents, merged by the coalescer right after it (spec 30);
    # memory recall for the lead when memory is on.
    "DynamicContextMiddleware": _dynamic_context,
    "SkillActivationMiddleware": _skill_middleware(SkillActivationMiddleware),  # 18
    "SkillToolPolicyMiddleware": _skill_middleware(SkillToolPolicyMiddleware),  # 19
    "DurableContextMiddleware": lambda i: DurableContextMiddleware(),  # 20
    "SummarizationMiddleware": _summarization,  # 21
    "TodoListMiddleware": lambda i: TodoListMiddleware(  # 22 (plan mode)
        completion_reminders=i.settings.todo.completion_reminders,
        window_reminder=i.settings.todo.window_reminder,
    ),
    "TokenUsageMiddleware": lambda i: TokenUsageMiddleware(),  # 23
    "MemoryMiddleware": _memory,  # 25
    "TokenBudgetMiddleware": _token_budget,  # 33
    "CompletedSubagentUsageMiddleware": lambda i: CompletedSubagentUsageMiddleware(),  # 33
    "TitleMiddleware": _title,  # 24
    "ViewImageMiddleware": lambda i: ViewImageMiddleware(i.settings),  # 26 (vision models)
    "McpRoutingMiddleware": _mcp_routing,  # 27
    "DeferredToolPromotionAuditMiddleware": lambda i: (  # 28
        DeferredToolPromotionAuditMiddleware() if _tool_search_on(i) else None
    ),
    "DeferredToolFilterMiddleware": lambda i: DeferredToolFilterMiddleware(),  # 29
    "ClarificationMiddleware": lambda i: ClarificationMiddleware(  # 40
        mode=i.settings.clarification.mode
    ),
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
