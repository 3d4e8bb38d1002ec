"""DanglingToolCallMiddleware through real agent runs against a strict provider.

Each test feeds a history with a dangling or malformed tool call from one of the
three sources into a real ``create_agent`` graph with the assembled chain, and
a ``StrictRecordingModel`` rejects (HTTP 400) any request a strict provider
would reject. The run must reach the model's scripted answer, and the request
the model saw must pass ``check_strict_request``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from middlewares import dangling_tool_call
from middlewares.dangling_tool_call import (
    DANGLING_PLACEHOLDER_KEY,
    DanglingToolCallMiddleware,
    repair_tool_call_protocol,
)
from tests.support.agents import chain_for, make_agent, run_config, settings_for
from tests.support.strict_provider import StrictRecordingModel, check_strict_request


@tool
async def ls(path: str) -> str:
    """List a directory (test tool)."""
    return f"listing of {path}"


@tool
async def bash(command: str) -> str:
    """Run a command (test tool)."""
    return f"ran {command}"


def _model(answer_turn: int) -> StrictRecordingModel:
    """A strict model whose turn ``answer_turn`` answers with text."""
    return StrictRecordingModel.play(
        [{"content": f"unused {i}"} for i in range(answer_turn)] + [{"content": "final answer"}]
    )


async def _run(
    history: list[Any], answer_turn: int, tmp_path: Path, *, drop_dangling: bool = False
) -> tuple[dict[str, Any], StrictRecordingModel]:
    model = _model(answer_turn)
    chain = chain_for(settings_for(tmp_path))
    if drop_dangling:
        chain = [m for m in chain if not isinstance(m, DanglingToolCallMiddleware)]
    agent = make_agent(model, [ls, bash], middleware=chain)
    result = await agent.ainvoke({"messages": history}, run_config())
    return result, model


def _tool_ids_after(messages: list[Any], index: int) -> list[str]:
    ids = []
    for message in messages[index + 1 :]:
        if not isinstance(message, ToolMessage):
            break
        ids.append(message.tool_call_id)
    return ids


async def test_source_tool_calls_missing_and_misplaced_results(tmp_path: Path) -> None:
    ai = AIMessage(
        content="",
        tool_calls=[
            {"name": "ls", "args": {"path": "/a"}, "id": "call_ls"},
            {"name": "bash", "args": {"command": "make"}, "id": "call_bash"},
        ],
    )
    history = [
        HumanMessage("do two things"),
        ToolMessage("bash output", tool_call_id="call_bash", name="bash"),  # before its call
        ai,
        SystemMessage("a mid-history system note"),
        ToolMessage("orphan output", tool_call_id="call_nobody", name="ls"),
        HumanMessage("I interrupted you; continue"),
    ]
    result, model = await _run(history, 1, tmp_path)
    assert result["messages"][-1].content == "final answer"
    request = model.requests[-1]
    assert check_strict_request(request) == []
    ai_index = next(i for i, m in enumerate(request) if isinstance(m, AIMessage))
    assert _tool_ids_after(request, ai_index) == ["call_ls", "call_bash"]
    placeholder: Any = request[ai_index + 1]
    answered = request[ai_index + 2]
    assert placeholder.additional_kwargs[DANGLING_PLACEHOLDER_KEY] is True
    assert placeholder.status == "error"
    assert answered.content == "bash output"
    assert not any(getattr(m, "tool_call_id", None) == "call_nobody" for m in request)
    # Only the request was repaired: state keeps the history as it was.
    assert not any(m.additional_kwargs.get(DANGLING_PLACEHOLDER_KEY) for m in result["messages"])
    assert any(getattr(m, "tool_call_id", None) == "call_nobody" for m in result["messages"])


async def test_source_additional_kwargs_with_malformed_name_and_arguments(tmp_path: Path) -> None:
    raw = [
        {
            "id": "call_raw",
            "type": "function",
            "index": 0,
            "function": {"name": "my tool!", "arguments": '{"path": "/x"'},
        }
    ]
    history = [
        HumanMessage("go"),
        AIMessage(content="", additional_kwargs={"tool_calls": raw}),
        HumanMessage("and now?"),
    ]
    result, model = await _run(history, 1, tmp_path)
    assert result["messages"][-1].content == "final answer"
    request = model.requests[-1]
    assert check_strict_request(request) == []
    ai = next(m for m in request if isinstance(m, AIMessage))
    assert ai.tool_calls[0]["name"] == "my_tool"
    assert ai.tool_calls[0]["args"] == {"_invalid_arguments": '{"path": "/x"'}
    sent_raw = ai.additional_kwargs["tool_calls"][0]
    assert sent_raw["index"] == 0  # extra provider fields are preserved
    assert json.loads(sent_raw["function"]["arguments"]) == ai.tool_calls[0]["args"]
    stored = next(m for m in result["messages"] if isinstance(m, AIMessage))
    assert stored.additional_kwargs["tool_calls"] == raw


async def test_source_invalid_tool_calls_emitted_by_the_model(tmp_path: Path) -> None:
    model = StrictRecordingModel.play(
        [
            {
                "invalid_tool_calls": [
                    {"name": "bash", "args": "{broken", "id": "call_bad", "error": "x"}
                ]
            },
            {"content": "final answer"},
        ]
    )
    agent = make_agent(model, [ls, bash], middleware=chain_for(settings_for(tmp_path)))
    config = run_config()
    first = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert first["messages"][-1].invalid_tool_calls[0]["id"] == "call_bad"
    second = await agent.ainvoke({"messages": [HumanMessage("try again")]}, config)
    assert second["messages"][-1].content == "final answer"
    request = model.requests[-1]
    assert check_strict_request(request) == []
    ai = next(m for m in request if isinstance(m, AIMessage))
    assert ai.invalid_tool_calls == []
    assert ai.tool_calls[0]["id"] == "call_bad"
    assert ai.tool_calls[0]["args"] == {"_invalid_arguments": "{broken"}


async def test_without_the_middleware_a_strict_provider_rejects_the_history(tmp_path: Path) -> None:
    history = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[{"name": "ls", "args": {"path": "/"}, "id": "call_x"}]),
        HumanMessage("continue"),
    ]
    result, model = await _run(history, 1, tmp_path, drop_dangling=True)
    assert check_strict_request(model.requests[-1]) != []
    final = result["messages"][-1]
    assert final.additional_kwargs["deerflow_llm_error"]["status"] == 400


async def test_reused_ids_and_calls_without_ids(tmp_path: Path) -> None:
    history = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[{"name": "ls", "args": {"path": "/"}, "id": "dup"}]),
        ToolMessage("one", tool_call_id="dup"),
        AIMessage("", tool_calls=[{"name": "ls", "args": {"path": "/b"}, "id": "dup"}]),
        ToolMessage("two", tool_call_id="dup"),
        AIMessage("", invalid_tool_calls=[{"name": None, "args": None, "id": None, "error": None}]),
        HumanMessage("next"),
    ]
    result, model = await _run(history, 3, tmp_path)
    assert result["messages"][-1].content == "final answer"
    request = model.requests[-1]
    assert check_strict_request(request) == []
    contents = [m.content for m in request if isinstance(m, ToolMessage)]
    assert contents[:2] == ["one", "two"]


def test_clean_history_is_left_alone() -> None:
    messages: list[Any] = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[{"name": "ls", "args": {"path": "/"}, "id": "a"}]),
        ToolMessage("ok", tool_call_id="a"),
        AIMessage("done"),
    ]
    repaired, changed = repair_tool_call_protocol(list(messages))
    assert not changed
    assert all(a is b for a, b in zip(repaired, messages, strict=True))


def _random_history(rng: random.Random) -> list[Any]:
    """A history mixing sound turns with the defects the repair handles."""
    messages: list[Any] = [HumanMessage("go")]
    for turn in range(rng.randint(1, 6)):
        ids = [f"c{turn}_{i}" for i in range(rng.randint(0, 3))]
        calls = [{"name": rng.choice(["ls", "bad name!"]), "args": {}, "id": i} for i in ids]
        messages.append(AIMessage("", tool_calls=calls) if calls else AIMessage("text"))
        answered = [i for i in ids if rng.random() > 0.15]
        if rng.random() < 0.15:
            answered.reverse()
        if rng.random() < 0.1 and answered:
            answered.append(answered[0])  # a duplicate result
        messages.extend(ToolMessage("ok", tool_call_id=i, name="ls") for i in answered)
        if rng.random() < 0.1:
            messages.append(ToolMessage("orphan", tool_call_id="nobody", name="ls"))
        if rng.random() < 0.3:
            messages.append(HumanMessage("more"))
    return messages


def _shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (type(m).__name__, m.content, getattr(m, "tool_call_id", None), str(m.additional_kwargs))
        for m in messages
    ]


def test_the_fast_soundness_check_never_skips_a_needed_repair() -> None:
    """The one-pass check is an optimisation: results are identical to the full repair."""
    rng = random.Random(20261130)
    sound = 0
    for _ in range(2000):
        history = _random_history(rng)
        fast, fast_changed = repair_tool_call_protocol(history)
        full, full_changed = dangling_tool_call._repair(history)
        assert (fast_changed, _shape(fast)) == (full_changed, _shape(full))
        if not fast_changed:
            sound += 1
            assert fast is history
    assert 100 < sound < 1900  # both paths were exercised
