"""The scripted chat model: deterministic turns, tool calls, streaming, usage."""

from __future__ import annotations

import json
from functools import reduce
from operator import add
from pathlib import Path

import pytest
import yaml
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from pydantic import ValidationError

from runtime.scripted_model import EXHAUSTED_TEXT, ScriptedChatModel


def _model(script: list[dict[str, object]]) -> ScriptedChatModel:
    return ScriptedChatModel.model_validate({"script": script})


SCRIPT: list[dict[str, object]] = [
    {"tool_calls": [{"name": "bash", "args": {"description": "list", "command": "ls"}}]},
    {"content": "All done here."},
]


def test_turn_is_chosen_by_ai_message_count() -> None:
    model = _model(SCRIPT)
    first = model.invoke([HumanMessage("go")])
    assert first.tool_calls == [
        {
            "name": "bash",
            "args": {"description": "list", "command": "ls"},
            "id": "call_0_0",
            "type": "tool_call",
        }
    ]
    history = [HumanMessage("go"), first, ToolMessage("out", tool_call_id="call_0_0")]
    second = model.invoke(history)
    assert second.content == "All done here." and second.tool_calls == []
    # Stateless: a fresh instance (another process) answers the same.
    assert _model(SCRIPT).invoke(history).content == "All done here."


def test_past_the_end_says_exhausted() -> None:
    model = _model([{"content": "only"}])
    reply = model.invoke([HumanMessage("a"), AIMessage("only"), HumanMessage("b")])
    assert reply.content == EXHAUSTED_TEXT


def test_usage_and_finish_reason() -> None:
    reply = _model(SCRIPT).invoke([HumanMessage("a question")])
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["total_tokens"] == (
        reply.usage_metadata["input_tokens"] + reply.usage_metadata["output_tokens"]
    )
    assert reply.usage_metadata["output_tokens"] > 0
    assert reply.response_metadata["finish_reason"] == "tool_calls"


async def test_streams_token_chunks_that_add_up() -> None:
    model = _model([{"content": "one two three"}])
    chunks = [c async for c in model.astream([HumanMessage("x")])]
    assert [c.content for c in chunks[:-1]] == ["one ", "two ", "three"]
    full = reduce(add, chunks)
    assert isinstance(full, AIMessageChunk)
    assert full.content == "one two three"
    assert full.usage_metadata is not None and full.usage_metadata["output_tokens"] > 0


def test_streamed_tool_calls_parse() -> None:
    chunks = list(_model(SCRIPT).stream([HumanMessage("x")]))
    full = reduce(add, chunks)
    assert full.tool_calls[0]["name"] == "bash"
    assert full.tool_calls[0]["args"] == {"description": "list", "command": "ls"}


def test_bind_tools_returns_the_model() -> None:
    model = _model(SCRIPT)
    assert model.bind_tools([{"name": "bash"}]) is model


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_script_path(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"script{suffix}"
    path.write_text(json.dumps(SCRIPT) if suffix == ".json" else yaml.safe_dump(SCRIPT))
    model = ScriptedChatModel(script_path=str(path))
    assert model.invoke([HumanMessage("x")]).tool_calls[0]["name"] == "bash"


def test_malformed_turn_is_rejected() -> None:
    with pytest.raises(ValidationError):
        _model([{"contnet": "typo"}])
    with pytest.raises(ValidationError):
        _model([{"tool_calls": [{"args": {}}]}])
