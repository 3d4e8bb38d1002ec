"""Guardrails: a veto on every tool call's arguments, for every principal.

``GuardrailProvider`` is the interface (custom ones by ``guardrails.use``);
``RuleGuardrailProvider`` is the built-in rule set from ``guardrails.rules``:

- ``{tool: bash, deny_pattern: "rm\\s+-rf"}``: deny a call whose arguments match
  (the regex is searched in every string argument, nested ones included, at
  most ``MAX_MATCH_CHARS`` of each);
- ``{tool: web_fetch, max_calls_per_run: 5}``: deny calls past the fifth in a run.

``GuardrailAuthorizationAdapter`` presents an ``AuthorizationProvider`` as a
guardrail (``tool:<name>`` per call), so authorization and guardrails run as
one ordered list in GuardrailMiddleware: authorization first, then the rules.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from authz.principal import Principal
from authz.provider import FailClosedAuthorizer

__all__ = [
    "MAX_MATCH_CHARS",
    "GuardrailAuthorizationAdapter",
    "GuardrailDecision",
    "GuardrailProvider",
    "GuardrailRequest",
    "RuleGuardrailProvider",
]

MAX_MATCH_CHARS = 100_000
_MAX_TRACKED_RUNS = 1024


@dataclass(frozen=True)
class GuardrailRequest:
    """One tool call as a guardrail sees it."""

    principal: Principal
    tool_name: str
    args: Mapping[str, Any]
    tool_call_id: str
    run_key: tuple[str, str] = ("-", "-")


@dataclass(frozen=True)
class GuardrailDecision:
    allowed: bool
    rule: str | None = None
    reason: str | None = None
    provider: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class GuardrailProvider(Protocol):
    """Allows or denies one call; may also define ``async def aevaluate(request)``."""

    def evaluate(self, request: GuardrailRequest) -> GuardrailDecision: ...


class GuardrailAuthorizationAdapter:
    """An authorization provider used as the first guardrail (Layer 2 execution check).

    ``exempt_tools`` are names that skip the provider call (the generated
    ``tool_search`` when the build has a concrete deferred setup, spec 11):
    their catalog was already filtered by Layer 1.
    """

    name = "authorization"

    def __init__(self, authorizer: FailClosedAuthorizer, *, exempt_tools: Sequence[str] = ()):
        self.authorizer = authorizer
        self._exempt = frozenset(exempt_tools)

    def _decision(self, request: GuardrailRequest, allowed: bool, rule: Any, reason: Any) -> Any:
        return GuardrailDecision(allowed, rule=rule, reason=reason, provider=self.name)

    def evaluate(self, request: GuardrailRequest) -> GuardrailDecision:
        if request.tool_name in self._exempt:
            return GuardrailDecision(True, rule="deferred-tool-search", provider=self.name)
        d = self.authorizer.authorize(request.principal, "tool", "use", request.tool_name)
        return self._decision(request, d.allowed, d.rule, d.reason)

    async def aevaluate(self, request: GuardrailRequest) -> GuardrailDecision:
        if request.tool_name in self._exempt:
            return GuardrailDecision(True, rule="deferred-tool-search", provider=self.name)
        d = await self.authorizer.aauthorize(request.principal, "tool", "use", request.tool_name)
        return self._decision(request, d.allowed, d.rule, d.reason)


@dataclass(frozen=True)
class _Rule:
    label: str
    tool: str
    pattern: re.Pattern[str] | None
    max_calls: int | None
    reason: str | None

    def applies(self, tool_name: str) -> bool:
        return self.tool in ("*", tool_name)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


class RuleGuardrailProvider:
    """The built-in rules (``guardrails.rules``), applied to every principal, admins included.

    Args:
        rules: mappings with ``tool`` (a name or ``*``) and ``deny_pattern``
            (a regex) and/or ``max_calls_per_run``, optionally ``reason``.
    """

    name = "rules"

    def __init__(self, rules: Sequence[Mapping[str, Any]]) -> None:
        parsed: list[_Rule] = []
        for index, raw in enumerate(rules):
            pattern = raw.get("deny_pattern")
            max_calls = raw.get("max_calls_per_run")
            if pattern is None and max_calls is None:
                raise ValueError(f"rules[{index}]: needs deny_pattern or max_calls_per_run")
            try:
                compiled = re.compile(pattern) if pattern is not None else None
            except re.error as exc:
                raise ValueError(f"rules[{index}].deny_pattern: {exc}") from None
            tool = str(raw.get("tool") or "*")
            parsed.append(
                _Rule(f"rules[{index}]:{tool}", tool, compiled, max_calls, raw.get("reason"))
            )
        self._rules = tuple(parsed)
        # (run key) -> (rule label) -> calls allowed so far; bounded, oldest runs dropped.
        self._counts: OrderedDict[tuple[str, str], dict[str, int]] = OrderedDict()

    @staticmethod
    def _matches(rule: _Rule, texts: list[str]) -> bool:
        assert rule.pattern is not None
        return any(rule.pattern.search(text) for text in texts)

    def _run_counts(self, run_key: tuple[str, str]) -> dict[str, int]:
        counts = self._counts.get(run_key)
        if counts is None:
            counts = self._counts[run_key] = {}
            while len(self._counts) > _MAX_TRACKED_RUNS:
                self._counts.popitem(last=False)
        return counts

    def evaluate(self, request: GuardrailRequest) -> GuardrailDecision:
        args = request.args if isinstance(request.args, Mapping) else {}
        texts: list[str] | None = None
        counted: list[str] = []
        counts = self._run_counts(request.run_key)
        for rule in self._rules:
            if not rule.applies(request.tool_name):
                continue
            if rule.pattern is not None:
                if texts is None:
                    texts = [text[:MAX_MATCH_CHARS] for text in _strings(args)]
                matched = self._matches(rule, texts)
            else:
                matched = False
            if matched:
                reason = rule.reason or "arguments match a denied pattern"
                return GuardrailDecision(False, rule=rule.label, reason=reason, provider=self.name)
            if rule.max_calls is not None:
                if counts.get(rule.label, 0) >= rule.max_calls:
                    reason = rule.reason or f"at most {rule.max_calls} calls per run"
                    return GuardrailDecision(
                        False, rule=rule.label, reason=reason, provider=self.name
                    )
                counted.append(rule.label)
        for label in counted:  # only an allowed call consumes the budget
            counts[label] = counts.get(label, 0) + 1
        return GuardrailDecision(True, provider=self.name)
