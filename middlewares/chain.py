"""Assembly of the middleware chain, in the spec's order (000, "Assembly order").

The order is a runtime contract: ``before_*`` hooks run in list order,
``after_*`` in reverse, and ``wrap_*`` hooks nest with the first entry
outermost. Entries whose middleware does not exist yet are absent; the order of
those that exist is already the spec's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from middlewares.dangling_tool_call import DanglingToolCallMiddleware  # issue 7: 8
from middlewares.input_sanitization import InputSanitizationMiddleware  # issue 7: 1
from middlewares.llm_error_handling import LLMErrorHandlingMiddleware  # issue 7: 9
from middlewares.model_content_compatibility import (  # issue 7: 34
    ModelContentCompatibilityMiddleware,
)
from middlewares.model_length_finish_reason import (  # issue 7: 38
    ModelLengthFinishReasonMiddleware,
)
from middlewares.pii_redaction import PiiRedactionMiddleware  # issue 7: 4
from middlewares.read_before_write import ReadBeforeWriteMiddleware  # issue 5: 13
from middlewares.safety_finish_reason import SafetyFinishReasonMiddleware  # issue 7: 39
from middlewares.sandbox_audit import SandboxAuditMiddleware  # issue 5: 12
from middlewares.subagent_limit import SubagentLimitMiddleware  # issue 8: 31
from middlewares.system_message_coalescing import (  # issue 7: 30
    SystemMessageCoalescingMiddleware,
)
from middlewares.terminal_response import TerminalResponseMiddleware  # issue 7: 37
from middlewares.tool_error_handling import ToolErrorHandlingMiddleware  # issue 7: 15
from middlewares.tool_output_budget import ToolOutputBudgetMiddleware  # issue 7: 2
from middlewares.tool_receipt import ToolReceiptMiddleware  # issue 7: 15 (receipts)
from middlewares.tool_result_sanitization import (  # issue 7: 3
    ToolResultSanitizationMiddleware,
)
from runtime.config import ModelConfig, Settings
from runtime.run_options import RunOptions
from subagents.limits import resolve_subagent_limits

__all__ = [
    "ChainInputs",
    "build_lead_runtime_middlewares",
    "build_middlewares",
    "build_subagent_runtime_middlewares",
]


@dataclass(frozen=True)
class ChainInputs:
    """What assembly may depend on: config, the run's switches and its model."""

    settings: Settings
    options: RunOptions
    model: ModelConfig
    effective: dict[str, Any] = field(default_factory=dict)


def build_lead_runtime_middlewares(inputs: ChainInputs) -> list[AgentMiddleware[Any, Any]]:
    """The shared runtime base (spec numbers 1-16)."""
    settings = inputs.settings
    chain: list[AgentMiddleware[Any, Any]] = []
    # 1 InputSanitization: first, the outermost model wrapper.
    chain.append(InputSanitizationMiddleware())
    # 2 ToolOutputBudget (tool_output.enabled).
    if settings.tool_output.enabled:
        chain.append(ToolOutputBudgetMiddleware.from_settings(settings))
    # 3 ToolResultSanitization: inner of the budget.
    chain.append(ToolResultSanitizationMiddleware())
    # 4 PiiRedaction (optional, pii_redaction.enabled).
    if settings.pii_redaction.enabled:
        chain.append(PiiRedactionMiddleware.from_config(settings.pii_redaction))
    # 8 DanglingToolCall.
    chain.append(DanglingToolCallMiddleware())
    # 9 LLMErrorHandling (llm_error_handling.enabled, default on).
    if settings.llm_error_handling.enabled:
        chain.append(
            LLMErrorHandlingMiddleware.from_config(
                settings.llm_error_handling, inputs.model, scope=str(settings.data_root_path())
            )
        )
    # 15 ToolReceipt (verification.receipts_enabled): the outermost tool wrapper of the
    # guard segment, so it must stay ahead of 11 Authorization/Guardrail, 12 SandboxAudit,
    # 13 ReadBeforeWrite and 14 ToolProgress.
    if settings.verification.receipts_enabled:
        chain.append(ToolReceiptMiddleware.from_config(settings.verification))
    # 12 SandboxAudit (issue 5): unconditional; lead and subagents.
    chain.append(SandboxAuditMiddleware())
    # 13 ReadBeforeWrite (issue 5): read_before_write.enabled.
    if settings.read_before_write.enabled:
        chain.append(ReadBeforeWriteMiddleware.from_settings(settings))
    # 15 ToolErrorHandling.
    chain.append(ToolErrorHandlingMiddleware())
    return chain


def build_subagent_runtime_middlewares(inputs: ChainInputs) -> list[AgentMiddleware[Any, Any]]:
    """The subagent chain: most of the runtime base plus its own tail."""
    settings = inputs.settings
    chain = build_lead_runtime_middlewares(inputs)
    # 30 SystemMessageCoalescing, 34 ModelContentCompatibility.
    chain.append(SystemMessageCoalescingMiddleware())
    chain.append(ModelContentCompatibilityMiddleware())
    # 37 TerminalResponse, 38 ModelLengthFinishReason, 39 SafetyFinishReason (optional).
    chain.append(TerminalResponseMiddleware())
    chain.append(ModelLengthFinishReasonMiddleware())
    if settings.safety_finish_reason.enabled:
        chain.append(SafetyFinishReasonMiddleware(settings.safety_finish_reason.finish_reasons))
    return chain


def build_middlewares(
    inputs: ChainInputs,
    *,
    custom_middlewares: Sequence[AgentMiddleware[Any, Any]] = (),
) -> list[AgentMiddleware[Any, Any]]:
    """The lead chain: base, lead-only segment, custom, extensions, then the tail."""
    settings = inputs.settings
    chain = build_lead_runtime_middlewares(inputs)
    # 30 SystemMessageCoalescing.
    chain.append(SystemMessageCoalescingMiddleware())
    # 31 SubagentLimit (subagent_enabled).
    if inputs.effective.get("subagent_enabled"):
        limits = resolve_subagent_limits(inputs.settings.subagents, inputs.options)
        chain.append(SubagentLimitMiddleware(limits))
    # 34 ModelContentCompatibility.
    chain.append(ModelContentCompatibilityMiddleware())
    chain.extend(custom_middlewares)
    # 37 TerminalResponse.
    chain.append(TerminalResponseMiddleware())
    # 38 ModelLengthFinishReason.
    chain.append(ModelLengthFinishReasonMiddleware())
    # 39 SafetyFinishReason (optional, safety_finish_reason.enabled).
    if settings.safety_finish_reason.enabled:
        chain.append(SafetyFinishReasonMiddleware(settings.safety_finish_reason.finish_reasons))
    return chain
