"""Clarification through the real server: an interrupt Studio and the SDK resume."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from tests.support.scripted import ai_text, ai_tools, tool_call

pytestmark = pytest.mark.server

ASK = tool_call("ask_clarification", question="Which format?", options=["CSV", "JSON"])


async def test_interrupt_then_resume_finishes_with_the_answer(
    scenario: Any, chain_profile: str
) -> None:
    s = await scenario(
        [ai_tools(tool_call("echo", text="early"), ASK), ai_text("Exporting as JSON.")],
        all_optional=chain_profile == "all_optional",
    )
    await s.send("export my data")
    thread = await s.client.threads.get(s.thread_id)
    assert thread["status"] == "interrupted"
    (pending,) = [i for items in thread["interrupts"].values() for i in items]
    (card,) = pending["value"]
    assert card["action_request"]["action"] == "ask_clarification"
    assert card["config"]["allow_respond"] is True
    assert card["human_input"]["version"] == 1 and card["human_input"]["options"] == [
        "CSV",
        "JSON",
    ]
    assert "Which format?" in card["description"]
    assert len(s.calls) == 1

    await s.resume([{"type": "response", "args": "JSON"}])
    thread = await s.client.threads.get(s.thread_id)
    assert thread["status"] == "idle"
    # The model saw the answer as the question's tool result, and nothing else ran.
    last = s.calls[-1]
    (answer,) = [m for m in last.messages if isinstance(m, ToolMessage)]
    assert answer.text == "JSON" and answer.name == "ask_clarification"
    assert "echo: early" not in last.text
    messages = await s.messages()
    tool = next(m for m in messages if m["type"] == "tool")
    assert tool["additional_kwargs"]["human_input_response"]["response_kind"] == "option"
    assert messages[-1]["content"] == "Exporting as JSON."
    s.assert_strict()
    s.assert_single_leading_system()
    await s.assert_nothing_hidden_persisted()
    assert (await s.state())["values"]["title"] == "export my data"


async def test_a_plain_string_resume_and_a_new_message_both_answer(scenario: Any) -> None:
    s = await scenario([ai_tools(ASK), ai_text("CSV it is.")])
    await s.send("export")
    await s.resume("CSV")
    assert (await s.messages())[-1]["content"] == "CSV it is."

    t = await scenario([ai_tools(ASK), ai_text("Noted: CSV.")])
    await t.send("export")
    assert (await t.client.threads.get(t.thread_id))["status"] == "interrupted"
    await t.send("CSV please")  # a new message instead of a resume
    messages = await t.messages()
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "human", "ai"]
    assert messages[-1]["content"] == "Noted: CSV."
    assert "CSV please" in [m.text for m in t.calls[-1].messages[-3:]]
    t.assert_strict()


async def test_mode_end_keeps_the_spec_form(scenario: Any) -> None:
    s = await scenario([ai_tools(ASK), ai_text("Thanks, CSV.")], clarification={"mode": "end"})
    await s.send("export")
    thread = await s.client.threads.get(s.thread_id)
    assert thread["status"] == "idle" and not thread.get("interrupts")
    messages = await s.messages()
    assert messages[-1]["type"] == "tool"
    assert messages[-1]["artifact"]["human_input"]["mode"] == "choice_with_other"
    await s.send("CSV")
    assert (await s.messages())[-1]["content"] == "Thanks, CSV."
    s.assert_strict()
