"""Tool-call helpers: removal clears every field, rewrites reach every field."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from middlewares.tool_call_args import (
    clone_ai_message_with_tool_calls,
    declared_tool_calls,
    message_tool_call_ids,
    pair_tool_call_results,
    rewrite_tool_call_args,
)


def _anthropic_style_message() -> AIMessage:
    return AIMessage(
        content=[
            {"type": "text", "text": "let me look"},
            {"type": "tool_use", "id": "a", "name": "ls", "input": {"path": "/"}},
            {"type": "tool_use", "id": "b", "name": "bash", "input": {"command": "rm"}},
        ],
        tool_calls=[
            {"name": "ls", "args": {"path": "/"}, "id": "a"},
            {"name": "bash", "args": {"command": "rm"}, "id": "b"},
        ],
        invalid_tool_calls=[{"name": "x", "args": "{", "id": "c", "error": "bad"}],
        additional_kwargs={
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            ],
            "other": 1,
        },
    )


def test_removing_all_calls_removes_stale_blocks_and_payloads() -> None:
    message = _anthropic_style_message()
    cleared = clone_ai_message_with_tool_calls(message, [])
    assert cleared.tool_calls == []
    assert cleared.invalid_tool_calls == []
    assert "tool_calls" not in cleared.additional_kwargs
    assert cleared.additional_kwargs["other"] == 1
    assert cleared.content == [{"type": "text", "text": "let me look"}]
    assert len(message.tool_calls) == 2  # the original is untouched


def test_keeping_some_calls() -> None:
    message = _anthropic_style_message()
    kept = clone_ai_message_with_tool_calls(message, [message.tool_calls[0]])
    assert [c["id"] for c in kept.tool_calls] == ["a"]
    assert [e["id"] for e in kept.additional_kwargs["tool_calls"]] == ["a"]
    assert [b.get("id") for b in kept.content if isinstance(b, dict)] == [None, "a"]


def test_declared_calls_from_all_sources_in_order() -> None:
    message = AIMessage(
        content="",
        tool_calls=[{"name": "a", "args": {}, "id": "1"}],
        additional_kwargs={
            "tool_calls": [
                {"id": "1", "function": {"name": "a", "arguments": "{}"}},
                {"id": "2", "function": {"name": "b", "arguments": "not json"}},
            ]
        },
        invalid_tool_calls=[{"name": "c", "args": "[1]", "id": "3", "error": None}],
    )
    calls = declared_tool_calls(message)
    assert [(c.id, c.source) for c in calls] == [
        ("1", "tool_calls"),
        ("2", "additional_kwargs"),
        ("3", "invalid_tool_calls"),
    ]
    assert calls[1].raw_args == "not json"
    assert calls[2].args is None and calls[2].raw_args == "[1]"
    assert message_tool_call_ids(message) == ["1", "2", "3"]


def test_rewrite_args_everywhere() -> None:
    message = _anthropic_style_message()
    rewritten = rewrite_tool_call_args(message, "b", {"command": "echo safe"})
    assert rewritten.tool_calls[1]["args"] == {"command": "echo safe"}
    raw = rewritten.additional_kwargs["tool_calls"][1]["function"]["arguments"]
    assert json.loads(raw) == {"command": "echo safe"}
    assert rewritten.content[2]["input"] == {"command": "echo safe"}  # type: ignore[index]
    assert rewritten.tool_calls[0]["args"] == {"path": "/"}


def test_pairing_uses_each_result_once_and_after_its_call() -> None:
    messages = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[{"name": "a", "args": {}, "id": "same"}]),
        ToolMessage("first", tool_call_id="same"),
        AIMessage("", tool_calls=[{"name": "a", "args": {}, "id": "same"}]),
        ToolMessage("second", tool_call_id="same"),
        AIMessage("", tool_calls=[{"name": "b", "args": {}, "id": "lost"}]),
    ]
    pairs = pair_tool_call_results(messages)
    assert [(p.ai_index, p.result.content if p.result else None) for p in pairs] == [
        (1, "first"),
        (3, "second"),
        (5, None),
    ]
