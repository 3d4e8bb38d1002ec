"""GuardrailMiddleware in real ``create_agent`` graphs with the scripted model."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import HumanMessage, ToolMessage

from authz.guardrails import RuleGuardrailProvider
from authz.outcome import AUTHORIZATION_OUTCOME_KEY, AuthorizationOutcome
from authz.provider import AuthorizationDecision, FailClosedAuthorizer, RolePolicyProvider
from middlewares.guardrail import GUARDRAIL_EVENT, GuardrailMiddleware
from middlewares.tool_error_handling import ToolErrorHandlingMiddleware
from runtime.recording_model import RecordingChatModel, recorded_calls
from tests.support.agents import make_agent
from tests.support.reliability_tools import bash
from tests.support.scripted import ai_text, ai_tools, tool_call
from tests.support.tools import echo

POLICY = FailClosedAuthorizer(
    RolePolicyProvider(roles={"ro": ["tool:echo"], "admin": ["*"]}, default_role="ro")
)


def model(script: list[dict[str, Any]]) -> tuple[RecordingChatModel, str]:
    key = f"guardrail-{uuid.uuid4().hex}"
    return RecordingChatModel.model_validate({"script": script, "recording_key": key}), key


async def run(
    middleware: GuardrailMiddleware,
    script: list[dict[str, Any]],
    *,
    roles: list[str] | None = None,
    context: dict[str, Any] | None = None,
) -> tuple[list[Any], list[dict[str, Any]], str]:
    chat, key = model(script)
    agent: Any = make_agent(
        chat, [echo, bash], middleware=[middleware, ToolErrorHandlingMiddleware()]
    )
    user = {"identity": "alice", "roles": roles or []}
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex, "langgraph_auth_user": user}}
    events: list[dict[str, Any]] = []
    messages: list[Any] = []
    async for mode, data in agent.astream(
        {"messages": [HumanMessage("go")]},
        config,
        stream_mode=["custom", "values"],
        context=context,
    ):
        if mode == "custom":
            events.append(data)
        else:
            messages = data["messages"]
    return messages, events, key


def tool_results(messages: list[Any]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


async def test_denied_tools_leave_the_schema_and_a_forced_call_is_an_error_result() -> None:
    messages, events, key = await run(
        GuardrailMiddleware(authorizer=POLICY),
        [
            ai_tools(tool_call("bash", description="d", command="ls"), tool_call("echo", text="x")),
            ai_text("done"),
        ],
    )
    assert recorded_calls(key)[0].tools == ["echo"]
    denied, allowed = tool_results(messages)
    assert denied.status == "error" and "denied by authorization" in denied.text
    assert denied.additional_kwargs["deerflow_tool_meta"]["error_type"] == "permission_denied"
    assert allowed.text == "echo: x"
    decisions = [(e["tool"], e["decision"]) for e in events if e["type"] == GUARDRAIL_EVENT]
    assert decisions == [("bash", "deny"), ("echo", "allow")]


async def test_guardrails_apply_to_admins_and_run_after_authorization() -> None:
    rules = RuleGuardrailProvider([{"tool": "*", "deny_pattern": "secret"}])
    messages, events, key = await run(
        GuardrailMiddleware(authorizer=POLICY, guardrail=rules),
        [
            ai_tools(tool_call("echo", text="the secret"), tool_call("echo", text="fine")),
            ai_text("done"),
        ],
        roles=["admin"],
    )
    assert set(recorded_calls(key)[0].tools) == {"echo", "bash"}
    blocked, fine = tool_results(messages)
    assert blocked.status == "error" and "rules" in blocked.text
    assert fine.text == "echo: fine"
    denial = next(e for e in events if e["type"] == GUARDRAIL_EVENT and e["decision"] == "deny")
    assert denial["provider"] == "rules" and denial["rule"] == "rules[0]:*"
    assert "the secret" not in str(denial)


class ExplodingGuardrail:
    name = "exploding"

    def evaluate(self, request: Any) -> Any:
        raise RuntimeError("guardrail service down")


class SlowAllow:
    name = "async-allow"

    def evaluate(self, request: Any) -> Any:
        raise AssertionError("the async hook must use aevaluate")

    async def aevaluate(self, request: Any) -> Any:
        from authz.guardrails import GuardrailDecision

        return GuardrailDecision(True, provider=self.name)


async def test_a_guardrail_that_raises_denies() -> None:
    messages, _, _ = await run(
        GuardrailMiddleware(guardrail=ExplodingGuardrail()),
        [ai_tools(tool_call("echo", text="x")), ai_text("done")],
    )
    (result,) = tool_results(messages)
    assert result.status == "error" and "guardrail error" in result.text


async def test_async_guardrails_are_awaited() -> None:
    messages, _, _ = await run(
        GuardrailMiddleware(guardrail=SlowAllow()),
        [ai_tools(tool_call("echo", text="x")), ai_text("done")],
    )
    assert tool_results(messages)[0].text == "echo: x"


async def test_outcomes_are_published_into_the_run_context_by_tool_call_id() -> None:
    context: dict[str, Any] = {"run": "context"}
    await run(
        GuardrailMiddleware(authorizer=POLICY),
        [ai_tools(tool_call("bash", description="d", command="ls")), ai_text("done")],
        context=context,
    )
    (outcome,) = context[AUTHORIZATION_OUTCOME_KEY].values()
    assert isinstance(outcome, AuthorizationOutcome)
    assert outcome.tool_name == "bash" and not outcome.allowed


async def test_an_authorizer_returning_a_bare_bool_is_accepted() -> None:
    class Bool:
        def authorize(self, principal: Any, resource: str, action: str, name: Any = None) -> Any:
            return name == "echo"

    messages, _, key = await run(
        GuardrailMiddleware(authorizer=FailClosedAuthorizer(Bool())),
        [ai_tools(tool_call("echo", text="x")), ai_text("done")],
    )
    assert recorded_calls(key)[0].tools == ["echo"]
    assert tool_results(messages)[0].text == "echo: x"
    assert isinstance(
        FailClosedAuthorizer(Bool()).authorize(None, "tool", "use", "echo"),  # type: ignore[arg-type]
        AuthorizationDecision,
    )
