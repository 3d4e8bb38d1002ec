"""Resolving placements against a built-in stack, and the host's ordering invariants.

The anchors are the ones spec 004 documents ("Where each placement lands today"):

=================  ==========================================  ========================================
Placement          Lead agent chain                            Subagent chain
=================  ==========================================  ========================================
TOOL_VISIBLE       outermost, before InputSanitization         same
MODEL_LOGICAL      immediately outer of LLMErrorHandling       same
STANDARD           the MODEL_LOGICAL anchor                    same
MODEL_PHYSICAL     inner of SafetyFinishReason, outer of        inner of SystemMessageCoalescing, the
                   Clarification                               last middleware
TOOL_RAW           outer of Clarification                      innermost
=================  ==========================================  ========================================

When a placement's primary anchor is absent from the stack, the next rule
applies and a warning is logged (a silently degraded placement would change
what the extension observes). Fallbacks: TOOL_VISIBLE -> the outermost end;
MODEL_LOGICAL/STANDARD -> just inner of InputSanitization, else the outermost
end; MODEL_PHYSICAL and TOOL_RAW -> the innermost end. The subagent chain has
no ClarificationMiddleware, so its TOOL_RAW contributions always take the
fallback (and warn), exactly as the document says.

Contributions resolving to the same point are ordered by ``order`` (lower is
outer), then registration order. The final stack is then checked against the
host's ordering invariants; a violation is the one hard failure and names the
extension responsible.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from deerflow_extension_api._types import AgentScope, Placement

__all__ = [
    "ExtensionOrderingError",
    "StackEntry",
    "insert_contributions",
    "resolve_index",
    "validate_ordering",
]

logger = logging.getLogger("deerflow_extension_api")

INPUT_SANITIZATION = "InputSanitizationMiddleware"
LLM_ERROR_HANDLING = "LLMErrorHandlingMiddleware"
CLARIFICATION = "ClarificationMiddleware"
COALESCER = "SystemMessageCoalescingMiddleware"

# (rule kind, anchor name): "before"/"after" an anchor, or an end of the stack.
_Rule = tuple[str, str | None]
_RULES: dict[tuple[Placement, AgentScope], tuple[_Rule, ...]] = {}
for _scope in (AgentScope.LEAD, AgentScope.SUBAGENT):
    _RULES[(Placement.TOOL_VISIBLE, _scope)] = (("before", INPUT_SANITIZATION), ("outermost", None))
    _logical: tuple[_Rule, ...] = (
        ("before", LLM_ERROR_HANDLING),
        ("after", INPUT_SANITIZATION),
        ("outermost", None),
    )
    _RULES[(Placement.MODEL_LOGICAL, _scope)] = _logical
    _RULES[(Placement.STANDARD, _scope)] = _logical
    _RULES[(Placement.TOOL_RAW, _scope)] = (("before", CLARIFICATION), ("innermost", None))
_RULES[(Placement.MODEL_PHYSICAL, AgentScope.LEAD)] = (
    ("before", CLARIFICATION),
    ("innermost", None),
)
_RULES[(Placement.MODEL_PHYSICAL, AgentScope.SUBAGENT)] = (
    ("after", COALESCER),
    ("innermost", None),
)


class ExtensionOrderingError(RuntimeError):
    """The final stack breaks a host ordering invariant; names who is responsible."""


@dataclass(frozen=True)
class StackEntry:
    """One middleware of a stack and where it came from.

    ``kind`` is ``builtin``, ``custom`` (``custom_middlewares``), ``configured``
    (``extensions.middlewares``) or ``extension`` (a plugin contribution);
    ``origin`` names the source (the entry point, or the config entry).
    """

    middleware: AgentMiddleware[Any, Any]
    origin: str | None = None
    kind: str = "builtin"
    placement: Placement | None = None

    @property
    def name(self) -> str:
        return self.middleware.name

    @property
    def builtin(self) -> bool:
        return self.kind == "builtin"

    @property
    def responsible(self) -> str:
        if self.kind == "builtin":
            return f"the host (built-in {self.name})"
        if self.kind == "extension":
            return f"extension {self.origin} ({self.name})"
        return f"{self.origin} ({self.name})"


def _has(middleware: AgentMiddleware[Any, Any], family: str) -> bool:
    cls = type(middleware)
    return getattr(cls, family) is not getattr(AgentMiddleware, family) or getattr(
        cls, f"a{family}"
    ) is not getattr(AgentMiddleware, f"a{family}")


def resolve_index(
    names: Sequence[str], placement: Placement, scope: AgentScope
) -> tuple[int, bool]:
    """Insertion index in the built-in stack ``names``, and whether a fallback was taken."""
    rules = _RULES[(placement, scope)]
    for position, (kind, anchor) in enumerate(rules):
        if kind == "outermost":
            return 0, position > 0
        if kind == "innermost":
            return len(names), position > 0
        if anchor in names:
            index = names.index(anchor)
            return (index if kind == "before" else index + 1), position > 0
    raise AssertionError("unreachable: every rule list ends with a stack end")


def insert_contributions(
    stack: Sequence[StackEntry],
    contributions: Sequence[tuple[StackEntry, int]],
    scope: AgentScope,
) -> list[StackEntry]:
    """Insert ``(entry, order)`` contributions (already in registration order)."""
    names = [entry.name for entry in stack]
    buckets: dict[int, list[tuple[int, int, StackEntry]]] = {}
    for registration, (entry, order) in enumerate(contributions):
        assert entry.placement is not None
        index, fell_back = resolve_index(names, entry.placement, scope)
        if fell_back:
            logger.warning(
                "Extension %s: placement %s fell back to a secondary anchor (primary anchor "
                "middleware is absent from this stack); %s lands at position %d of the %s chain",
                entry.origin,
                entry.placement.name,
                entry.name,
                index,
                "lead" if scope is AgentScope.LEAD else "subagent",
            )
        buckets.setdefault(index, []).append((order, registration, entry))
    result: list[StackEntry] = []
    for index in range(len(stack) + 1):
        for _order, _registration, entry in sorted(buckets.get(index, ()), key=lambda b: b[:2]):
            result.append(entry)
        if index < len(stack):
            result.append(stack[index])
    return result


def _position(stack: Sequence[StackEntry], name: str) -> int | None:
    return next((i for i, e in enumerate(stack) if e.name == name and e.builtin), None)


def validate_ordering(stack: Sequence[StackEntry], scope: AgentScope) -> None:
    """Check the host invariants on the final stack; raise naming the one responsible."""
    problems: list[tuple[StackEntry, str]] = []
    sanitize = _position(stack, INPUT_SANITIZATION)
    if sanitize is not None:
        for entry in stack[:sanitize]:
            if _has(entry.middleware, "wrap_model_call"):
                reason = (
                    f"wraps model calls outside {INPUT_SANITIZATION}, which must be the "
                    "outermost wrap_model_call layer"
                )
                problems.append((entry, reason))
    clarification = _position(stack, CLARIFICATION)
    if scope is AgentScope.LEAD and clarification is not None:
        for entry in stack[clarification + 1 :]:
            problems.append((entry, f"sits after {CLARIFICATION}, which must be last"))
    builtin_model = [
        i
        for i, e in enumerate(stack)
        if e.builtin and e.name != CLARIFICATION and _has(e.middleware, "wrap_model_call")
    ]
    builtin_tool = [
        i
        for i, e in enumerate(stack)
        if e.builtin and e.name != CLARIFICATION and _has(e.middleware, "wrap_tool_call")
    ]
    llm_error = _position(stack, LLM_ERROR_HANDLING)
    for index, entry in enumerate(stack):
        if entry.kind != "extension":
            continue
        tool = _has(entry.middleware, "wrap_tool_call")
        model = _has(entry.middleware, "wrap_model_call")
        placement = entry.placement
        if (
            placement is Placement.TOOL_VISIBLE
            and tool
            and builtin_tool
            and index > builtin_tool[0]
        ):
            problems.append((entry, "is TOOL_VISIBLE but inner of a built-in tool wrapper"))
        if placement is Placement.TOOL_RAW and tool and builtin_tool and index < builtin_tool[-1]:
            problems.append((entry, "is TOOL_RAW but outer of a built-in tool wrapper"))
        if (
            placement is Placement.MODEL_PHYSICAL
            and model
            and builtin_model
            and index < builtin_model[-1]
        ):
            problems.append((entry, "is MODEL_PHYSICAL but outer of a built-in model wrapper"))
        if (
            placement is Placement.MODEL_LOGICAL
            and model
            and llm_error is not None
            and index > llm_error
        ):
            problems.append((entry, f"is MODEL_LOGICAL but inner of {LLM_ERROR_HANDLING}"))
    if problems:
        entry, reason = problems[0]
        raise ExtensionOrderingError(
            f"Agent construction failed: {entry.responsible} {reason} "
            f"({'lead' if scope is AgentScope.LEAD else 'subagent'} chain: "
            f"{', '.join(e.name for e in stack)})"
        )
