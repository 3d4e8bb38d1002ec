"""SystemMessageCoalescingMiddleware: one leading system message, state unchanged."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from tests.support.agents import make_agent, run_config, settings_for
from tests.support.strict_provider import StrictRecordingModel, check_strict_request


async def test_non_leading_system_messages_are_merged(tmp_path: Path) -> None:
    history = [
        HumanMessage("hi"),
        SystemMessage("rule: be brief"),
        AIMessage("hello"),
        SystemMessage(
            "<system-reminder>date: Monday</system-reminder>",
            additional_kwargs={"dynamic_context_reminder": True},
        ),
        HumanMessage("later"),
        SystemMessage(
            "<system-reminder>date: Tuesday</system-reminder>",
            additional_kwargs={"dynamic_context_reminder": True},
        ),
        SystemMessage(content=[{"type": "text", "text": "block rule"}]),
    ]
    model = StrictRecordingModel.play([{"content": "-"}, {"content": "ok"}])
    agent = make_agent(model, [], settings=settings_for(tmp_path), system_prompt="BASE PROMPT")
    result = await agent.ainvoke({"messages": history}, run_config())
    request = model.requests[-1]
    assert check_strict_request(request) == []
    system = request[0]
    assert isinstance(system, SystemMessage)
    assert sum(isinstance(m, SystemMessage) for m in request) == 1
    assert system.content == (
        "BASE PROMPT\n\nrule: be brief\n\n<system-reminder>date: Tuesday</system-reminder>\n\nblock rule"
    )
    assert system.additional_kwargs["deerflow_producer_kind"] == "system_message_coalescing"
    # Issue 19.6: the spec's content kind, not "system_prompt".
    assert system.additional_kwargs["deerflow_content_kind"] == "coalesced_system"
    assert sum(isinstance(m, SystemMessage) for m in result["messages"]) == 4  # state unchanged


async def test_requests_without_extra_system_messages_are_untouched(tmp_path: Path) -> None:
    model = StrictRecordingModel.play([{"content": "ok"}])
    agent = make_agent(model, [], settings=settings_for(tmp_path), system_prompt="BASE")
    await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    system = model.requests[0][0]
    assert system.content == "BASE" and "deerflow_producer_kind" not in system.additional_kwargs
