"""GuardrailMiddleware (spec 11): authorization and guardrails on every tool call.

Two layers, one provider list:

- **Layer 1 (capability filtering)**, ``wrap_model_call``: tools the principal
  may not use are removed from the schemas the model sees, so it is not
  tempted to call them.
- **Layer 2 (execution checks)**, ``wrap_tool_call``: every call goes through
  the gates in order, authorization first (``GuardrailAuthorizationAdapter``
  around the same provider Layer 1 used), then the configured guardrail
  (``guardrails.rules`` or a custom provider), which evaluates every call for
  every principal, admins included. The first deny wins.

A denied call never runs: it becomes an error ``ToolMessage`` stamped with
``deerflow_tool_meta`` (``error_type: permission_denied``, never an exception).
Every decision is published as an ``AuthorizationOutcome`` into the run's
context under ``__authorization_outcome`` (keyed by ``tool_call_id``), logged as
one structured line and emitted as a ``middleware:guardrail_decision`` custom
stream event: who, which tool, the decision and the rule, never argument values.
A gate that raises denies (fail closed).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from authz.guardrails import (
    GuardrailAuthorizationAdapter,
    GuardrailDecision,
    GuardrailRequest,
)
from authz.outcome import AuthorizationOutcome, publish_outcome
from authz.principal import Principal, build_principal_from_context
from authz.provider import FailClosedAuthorizer
from middlewares._run_scope import current_run_key, emit_event
from middlewares._tool_meta import blocked_tool_message

__all__ = ["GUARDRAIL_EVENT", "GuardrailMiddleware"]

logger = logging.getLogger("deerflow.authz.audit")

GUARDRAIL_EVENT = "middleware:guardrail_decision"
_MAX_CACHED_VIEWS = 512
ToolResult = ToolMessage | Command[Any]


def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
        name = tool.get("name")
        return name if isinstance(name, str) else None
    name = getattr(tool, "name", None)
    return name if isinstance(name, str) else None


class GuardrailMiddleware(AgentMiddleware[Any, Any]):
    """Authorization (Layer 1 and 2) and guardrails before every tool call.

    Args:
        authorizer: the fail-closed authorization provider (None: no authorization).
        guardrail: the configured guardrail provider (None: no guardrails).
        deferred_tool_search: the build has a concrete deferred-tool setup, so the
            generated ``tool_search`` skips the authorization call (its catalog
            was filtered by Layer 1); guardrails still evaluate it.

    Example::

        GuardrailMiddleware(authorizer=authorizer_for(settings),
                            guardrail=guardrail_for(settings))
    """

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        authorizer: FailClosedAuthorizer | None = None,
        guardrail: Any | None = None,
        deferred_tool_search: bool = False,
    ) -> None:
        super().__init__()
        if authorizer is None and guardrail is None:
            raise ValueError("GuardrailMiddleware needs an authorizer or a guardrail")
        self._authorizer = authorizer
        # (principal, offered tool names) -> names it may see; decisions are pure per policy.
        self._visible: dict[tuple[Principal, tuple[str | None, ...]], frozenset[str]] = {}
        gates: list[Any] = []
        if authorizer is not None:
            exempt = ("tool_search",) if deferred_tool_search else ()
            gates.append(GuardrailAuthorizationAdapter(authorizer, exempt_tools=exempt))
        if guardrail is not None:
            gates.append(guardrail)
        self._gates = tuple(gates)

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "gates": [_gate_name(g) for g in self._gates],
            "capability_filtering": self._authorizer is not None,
        }

    # --- Layer 1 -----------------------------------------------------------

    def _filtered(self, request: ModelRequest) -> ModelRequest:
        if self._authorizer is None or not request.tools:
            return request
        principal = build_principal_from_context(request.runtime)
        names = tuple(_tool_name(tool) for tool in request.tools)
        key = (principal, names)
        allowed = self._visible.get(key)
        if allowed is None:
            allowed = frozenset(
                name
                for name in names
                if name is not None
                and self._authorizer.authorize(principal, "tool", "use", name).allowed
            )
            if len(self._visible) >= _MAX_CACHED_VIEWS:
                self._visible.clear()
            self._visible[key] = allowed
        kept = [t for t, n in zip(request.tools, names, strict=True) if n is None or n in allowed]
        if len(kept) == len(request.tools):
            return request
        return request.override(tools=kept)

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._filtered(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(self._filtered(request))

    # --- Layer 2 -----------------------------------------------------------

    def _guardrail_request(self, request: ToolCallRequest) -> GuardrailRequest:
        call = request.tool_call
        args = call.get("args")
        return GuardrailRequest(
            principal=build_principal_from_context(request.runtime),
            tool_name=str(call.get("name") or ""),
            args=args if isinstance(args, dict) else {},
            tool_call_id=str(call.get("id") or ""),
            run_key=current_run_key(),
        )

    @staticmethod
    def _checked(gate: Any, decision: Any) -> GuardrailDecision:
        if isinstance(decision, GuardrailDecision):
            return decision
        logger.error("guardrail %s returned %r; denying", _gate_name(gate), decision)
        return GuardrailDecision(False, reason="guardrail error", provider=_gate_name(gate))

    def _evaluate(self, gr: GuardrailRequest) -> GuardrailDecision:
        decision = GuardrailDecision(True)
        for gate in self._gates:
            try:
                decision = self._checked(gate, gate.evaluate(gr))
            except Exception as exc:
                decision = _failed(gate, exc)
            if not decision.allowed:
                return decision
        return decision

    async def _aevaluate(self, gr: GuardrailRequest) -> GuardrailDecision:
        decision = GuardrailDecision(True)
        for gate in self._gates:
            try:
                evaluate = getattr(gate, "aevaluate", None)
                if evaluate is not None and inspect.iscoroutinefunction(evaluate):
                    raw = await evaluate(gr)
                else:
                    raw = gate.evaluate(gr)
                decision = self._checked(gate, raw)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                decision = _failed(gate, exc)
            if not decision.allowed:
                return decision
        return decision

    def _record(self, request: ToolCallRequest, gr: GuardrailRequest, d: GuardrailDecision) -> None:
        outcome = AuthorizationOutcome(
            tool_call_id=gr.tool_call_id,
            tool_name=gr.tool_name,
            allowed=d.allowed,
            provider=d.provider or None,
            rule=d.rule,
            reason=d.reason,
        )
        publish_outcome(request.runtime, gr.run_key, outcome)
        record = _audit_record(gr.principal, gr, d)
        level = logging.INFO if d.allowed else logging.WARNING
        if logger.isEnabledFor(level):
            logger.log(level, "authorization %s", json.dumps(record, sort_keys=True))
        emit_event({"type": GUARDRAIL_EVENT, **record})

    @staticmethod
    def _denied(gr: GuardrailRequest, d: GuardrailDecision) -> ToolMessage:
        why = d.reason or "not permitted"
        return blocked_tool_message(
            content=(
                f"Error: the call to {gr.tool_name!r} was denied by {d.provider or 'a guardrail'} "
                f"({why}). It was not run. Do not retry it; use another tool or tell the user."
            ),
            tool_call_id=gr.tool_call_id,
            name=gr.tool_name,
            error_type="permission_denied",
            source="guardrail",
            extra_kwargs={"deerflow_guardrail": {"provider": d.provider, "rule": d.rule}},
        )

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        gr = self._guardrail_request(request)
        decision = self._evaluate(gr)
        self._record(request, gr, decision)
        if not decision.allowed:
            return self._denied(gr, decision)
        return handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        gr = self._guardrail_request(request)
        decision = await self._aevaluate(gr)
        self._record(request, gr, decision)
        if not decision.allowed:
            return self._denied(gr, decision)
        return await handler(request)


def _gate_name(gate: Any) -> str:
    name = getattr(gate, "name", None)
    return name if isinstance(name, str) else type(gate).__name__


def _failed(gate: Any, exc: Exception) -> GuardrailDecision:
    logger.error("guardrail %s failed (%s); denying", _gate_name(gate), type(exc).__name__)
    return GuardrailDecision(False, reason="guardrail error", provider=_gate_name(gate))


def _audit_record(
    principal: Principal, gr: GuardrailRequest, d: GuardrailDecision
) -> dict[str, Any]:
    thread_id, run_id = gr.run_key
    return {
        "user_id": principal.user_id,
        "roles": list(principal.roles),
        "internal": principal.is_internal,
        "tool": gr.tool_name,
        "tool_call_id": gr.tool_call_id,
        "decision": "allow" if d.allowed else "deny",
        "provider": d.provider or None,
        "rule": d.rule,
        "reason": d.reason,
        "thread_id": thread_id,
        "run_id": run_id,
    }
