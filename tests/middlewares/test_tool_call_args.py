"""tool_call_args: per-occurrence pairing and model-side argument rewrites on every surface."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage

from middlewares.read_before_write import WRITE_BLOCK_KEY, elide_blocked_write_payloads
from middlewares.tool_call_args import pair_tool_call_results, rewrite_messages_tool_call_args


def _ai(*calls: tuple[str, str, dict[str, Any]], **kwargs: Any) -> AIMessage:
    return AIMessage(
        kwargs.pop("content", ""),
        tool_calls=[{"name": n, "id": i, "args": a} for n, i, a in calls],
        **kwargs,
    )


def test_pairing_is_per_occurrence_even_when_ids_repeat() -> None:
    first = _ai(("write_file", "dup", {"content": "a"}))
    second = _ai(("write_file", "dup", {"content": "b"}))
    blocked = ToolMessage("Error", tool_call_id="dup", additional_kwargs={WRITE_BLOCK_KEY: {}})
    ok = ToolMessage("OK", tool_call_id="dup")
    pairs = pair_tool_call_results([HumanMessage("x"), first, blocked, second, ok])
    assert [(p.message is first, p.result is blocked) for p in pairs[:1]] == [(True, True)]
    assert pairs[1].message is second and pairs[1].result is ok
    unanswered = pair_tool_call_results([_ai(("read_file", "r", {}))])
    assert unanswered[0].result is None


def test_rewrite_covers_structured_raw_block_and_chunk_surfaces() -> None:
    raw = [{"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}]
    content = [
        {"type": "text", "text": "saving"},
        {"type": "tool_use", "id": "c1", "name": "write_file", "input": {"content": "big"}},
        {"type": "tool_call", "id": "c1", "name": "write_file", "args": {"content": "big"}},
        {"type": "function_call", "call_id": "c1", "name": "write_file", "arguments": "{}"},
        {"type": "tool_use", "id": "c2", "name": "read_file", "input": {"path": "p"}},
    ]
    message = AIMessage(
        content=content,  # type: ignore[arg-type]
        tool_calls=[
            {"name": "write_file", "id": "c1", "args": {"content": "big"}},
            {"name": "read_file", "id": "c2", "args": {"path": "p"}},
        ],
        additional_kwargs={"tool_calls": raw, "other": 1},
    )
    new_args = {"content": "[elided]"}
    out = rewrite_messages_tool_call_args(
        [message], lambda _m, call: new_args if call["id"] == "c1" else None
    )
    assert out is not None
    (rewritten,) = out
    assert rewritten.tool_calls[0]["args"] == new_args
    assert rewritten.tool_calls[1]["args"] == {"path": "p"}
    assert (
        json.loads(rewritten.additional_kwargs["tool_calls"][0]["function"]["arguments"])
        == new_args
    )
    assert rewritten.additional_kwargs["other"] == 1
    blocks = rewritten.content
    assert blocks[1]["input"] == new_args and blocks[2]["args"] == new_args
    assert json.loads(blocks[3]["arguments"]) == new_args
    assert blocks[4]["input"] == {"path": "p"}
    # The input was not mutated.
    assert message.tool_calls[0]["args"] == {"content": "big"}
    assert message.content[1]["input"] == {"content": "big"}  # type: ignore[index]
    function = raw[0]["function"]
    assert isinstance(function, dict) and function["arguments"] == "{}"


def test_rewrite_chunks_and_identity_of_untouched_messages() -> None:
    chunk = AIMessageChunk(
        content="",
        tool_call_chunks=[
            {"name": "write_file", "id": "k1", "args": '{"content": "x"}', "index": 0}
        ],
    )
    human = HumanMessage("hi")
    out = rewrite_messages_tool_call_args([human, chunk], lambda _m, _c: {"content": "y"})
    assert out is not None
    assert out[0] is human
    assert json.loads(out[1].tool_call_chunks[0]["args"]) == {"content": "y"}
    assert rewrite_messages_tool_call_args([human, chunk], lambda _m, _c: None) is None


def test_elision_only_touches_blocked_occurrences_of_the_named_tool() -> None:
    payload = "p" * 300
    blocked_call = _ai(("write_file", "w1", {"path": "a", "content": payload}))
    later_same_id = _ai(("write_file", "w1", {"path": "a", "content": payload}))
    forged = _ai(("str_replace", "s1", {"old_str": payload, "new_str": payload}))
    messages = [
        blocked_call,
        ToolMessage(
            "Error",
            tool_call_id="w1",
            additional_kwargs={WRITE_BLOCK_KEY: {"path": "a", "tool": "write_file"}},
        ),
        later_same_id,
        ToolMessage("OK", tool_call_id="w1"),
        forged,
        ToolMessage(
            "Error", tool_call_id="s1", additional_kwargs={WRITE_BLOCK_KEY: {"tool": "write_file"}}
        ),
    ]
    out = elide_blocked_write_payloads(messages, min_chars=10)
    assert out is not None
    assert out[0].tool_calls[0]["args"]["content"].startswith("[elided: 300 characters")
    assert out[2] is later_same_id
    assert out[4] is forged  # the block names another tool: not trusted
    assert elide_blocked_write_payloads(messages, min_chars=1000) is None
    assert elide_blocked_write_payloads([HumanMessage("x")], min_chars=0) is None
