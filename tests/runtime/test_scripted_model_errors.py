"""ScriptedChatModel: provider-like failures and odd shapes, old scripts unchanged."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from runtime.scripted_model import (
    ScriptedChatModel,
    ScriptedConnectionError,
    ScriptedError,
    ScriptedProviderError,
    ScriptedStreamError,
    ScriptedTimeoutError,
    make_provider_error,
)


def _scripted(script: list[Any]) -> ScriptedChatModel:
    return ScriptedChatModel.model_validate({"script": script})


def test_old_script_shape_still_plays() -> None:
    model = _scripted(
        [
            {"tool_calls": [{"name": "bash", "args": {"command": "ls"}}]},
            {"content": "done"},
        ]
    )
    first = model.invoke([HumanMessage("hi")])
    assert first.tool_calls[0]["name"] == "bash"
    assert first.response_metadata["finish_reason"] == "tool_calls"
    second = model.invoke([HumanMessage("hi"), first])
    assert second.content == "done"


def test_errors_are_consumed_per_attempt_then_the_turn_answers() -> None:
    model = _scripted(
        [
            {
                "content": "recovered",
                "errors": [{"status": 429, "retry_after": "7"}, {"kind": "timeout"}],
            }
        ]
    )
    with pytest.raises(ScriptedProviderError) as first:
        model.invoke([HumanMessage("x")])
    assert first.value.status_code == 429
    assert first.value.response.headers["retry-after"] == "7"
    with pytest.raises(ScriptedTimeoutError):
        model.invoke([HumanMessage("x")])
    assert model.invoke([HumanMessage("x")]).content == "recovered"


def test_persistent_error_raises_every_time() -> None:
    model = _scripted([{"error": {"status": 500}}])
    for _ in range(3):
        with pytest.raises(ScriptedProviderError):
            model.invoke([HumanMessage("x")])


async def test_in_stream_error_after_some_chunks() -> None:
    model = _scripted(
        [
            {
                "content": "one two three four",
                "errors": [{"kind": "stream", "code": 504, "after_chunks": 2}],
            }
        ]
    )
    seen: list[str] = []
    with pytest.raises(ScriptedStreamError) as raised:
        async for chunk in model.astream([HumanMessage("x")]):
            seen.append(str(chunk.content))
    assert seen == ["one ", "two "]
    assert raised.value.code == 504  # type: ignore[attr-defined]
    assert not hasattr(raised.value, "status_code")


def test_real_sdk_exception_classes() -> None:
    rate = make_provider_error(ScriptedError(status=429, sdk="openai", retry_after=3))
    assert isinstance(rate, openai.RateLimitError)
    assert rate.response.headers["retry-after"] == "3"
    overloaded = make_provider_error(ScriptedError(status=529, sdk="anthropic"))
    assert isinstance(overloaded, anthropic.OverloadedError)
    assert isinstance(
        make_provider_error(ScriptedError(kind="timeout", sdk="openai")), openai.APITimeoutError
    )
    assert isinstance(
        make_provider_error(ScriptedError(kind="connection", sdk="anthropic")),
        anthropic.APIConnectionError,
    )
    streamed = make_provider_error(ScriptedError(kind="stream", sdk="openai", type="server_error"))
    assert isinstance(streamed, openai.APIError)
    assert streamed.type == "server_error"
    assert isinstance(
        make_provider_error(ScriptedError(kind="connection")), ScriptedConnectionError
    )


def test_odd_shapes_content_blocks_invalid_calls_finish_reasons() -> None:
    model = _scripted(
        [
            {
                "content": [{"type": [], "text": "x"}, {"type": "text", "text": "visible"}],
                "response_metadata": {"finish_reason": "content_filter"},
            },
            {"invalid_tool_calls": [{"name": "bad name", "args": "{oops", "id": "c1"}]},
            {"content": "", "response_metadata": {"finish_reason": "length"}},
        ]
    )
    first = model.invoke([HumanMessage("x")])
    assert first.content[0] == {"type": [], "text": "x"}  # type: ignore[index]
    assert first.response_metadata["finish_reason"] == "content_filter"
    second = model.invoke([HumanMessage("x"), AIMessage("a")])
    assert second.invalid_tool_calls[0]["args"] == "{oops"
    assert second.tool_calls == []
    third = model.invoke([HumanMessage("x"), AIMessage("a"), AIMessage("b")])
    assert third.content == ""
    assert third.response_metadata["finish_reason"] == "length"


async def test_streamed_odd_shapes_match_invoke() -> None:
    model = _scripted(
        [
            {"content": [{"type": {"k": 1}}, {"type": "text", "text": "hi"}]},
        ]
    )
    merged = None
    async for chunk in model.astream([HumanMessage("x")]):
        merged = chunk if merged is None else merged + chunk
    assert merged is not None
    assert {"type": "text", "text": "hi"} in merged.content
