"""model_response helpers: odd provider shapes never raise and are classified right."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware.types import ExtendedModelResponse, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from middlewares.model_response import (
    append_visible_text,
    finish_reason,
    has_tool_call_intent,
    has_visible_content,
    last_ai_message,
    replace_last_ai_message,
)


@pytest.mark.parametrize(
    ("content", "visible"),
    [
        ("", False),
        ("   \n", False),
        ("hello", True),
        ([{"type": [], "text": "hidden"}], False),
        ([{"type": {}, "text": "hidden"}], False),
        ([{"type": [], "text": "x"}, {"type": "text", "text": "shown"}], True),
        ([{"type": {"a": 1}}, "plain string block"], True),
        ([{"type": "reasoning", "reasoning": "thinking"}], False),
        ([{"type": "tool_use", "id": "t", "name": "x", "input": {}}], False),
        ([{"type": "text", "text": 5}], False),
        ([{"no_type": True}, {"type": None, "text": "x"}], False),
        ([{"type": "output_text", "text": "responses api"}], True),
    ],
)
def test_has_visible_content(content: Any, visible: bool) -> None:
    assert has_visible_content(AIMessage(content=content)) is visible


def test_tool_call_intent_in_every_field() -> None:
    assert not has_tool_call_intent(AIMessage("x"))
    assert has_tool_call_intent(AIMessage("", tool_calls=[{"name": "a", "args": {}, "id": "1"}]))
    assert has_tool_call_intent(
        AIMessage("", invalid_tool_calls=[{"name": "a", "args": "{", "id": "1", "error": None}])
    )
    assert has_tool_call_intent(
        AIMessage("", additional_kwargs={"tool_calls": [{"id": "1", "function": {"name": "a"}}]})
    )
    assert has_tool_call_intent(
        AIMessage(content=[{"type": "tool_use", "id": "1", "name": "a", "input": {}}])
    )
    assert not has_tool_call_intent(AIMessage(content=[{"type": ["tool_use"]}]))
    assert not has_tool_call_intent(None)


def test_finish_reason_sources_and_bad_values() -> None:
    assert finish_reason(AIMessage("", response_metadata={"finish_reason": "LENGTH"})) == "length"
    assert (
        finish_reason(AIMessage("", response_metadata={"stop_reason": "max_tokens"}))
        == "max_tokens"
    )
    assert finish_reason(AIMessage("", response_metadata={"finish_reason": ["x"]})) is None
    assert (
        finish_reason(AIMessage("", additional_kwargs={"finish_reason": "content_filter"}))
        == "content_filter"
    )
    assert finish_reason(AIMessage("")) is None
    assert finish_reason(None) is None


def test_append_visible_text_keeps_blocks() -> None:
    blocks: list[Any] = [
        {"type": "reasoning", "reasoning": "r"},
        {"type": []},
        {"type": "text", "text": "partial"},
    ]
    message = AIMessage(content=blocks)
    appended = append_visible_text(message, "NOTICE")
    assert appended.content[:3] == blocks
    assert appended.content[-1] == {"type": "text", "text": "NOTICE"}
    assert message.content == blocks
    assert append_visible_text(AIMessage("partial"), "N").content == "partial\n\nN"
    assert append_visible_text(AIMessage(""), "N").content == "N"


def test_last_ai_message_and_replace() -> None:
    ai = AIMessage("a", id="ai-1")
    response = ModelResponse(result=[ai, ToolMessage("t", tool_call_id="x")])
    assert last_ai_message(response) is ai
    assert last_ai_message([HumanMessage("h")]) is None
    assert last_ai_message(ExtendedModelResponse(model_response=response)) is ai
    new = AIMessage("b")
    replaced = replace_last_ai_message(response, new)
    assert replaced.result[0] is new
    assert replace_last_ai_message(ai, new) is new
