"""ToolErrorHandlingMiddleware and tool_result_meta: failures become readable results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command, interrupt

from middlewares.tool_result_meta import (
    TOOL_META_KEY,
    normalize_tool_result,
    read_tool_meta,
)
from tests.support.agents import make_agent, run_config, settings_for
from tests.support.strict_provider import StrictRecordingModel


@tool
async def explode(kind: str) -> str:
    """Fail in the requested way (test tool)."""
    errors: dict[str, Exception] = {
        "value": ValueError("bad input " + "x" * 5000),
        "missing": FileNotFoundError("/mnt/user-data/workspace/nope.txt"),
        "timeout": TimeoutError(),
        "memory": MemoryError(),
    }
    raise errors[kind]


@tool
async def ask(question: str) -> str:
    """Ask the user (test tool that interrupts)."""
    return str(interrupt({"question": question}))


@tool
async def present(path: str, tool_call_id: str = "") -> Command[Any]:
    """Return a Command carrying the result (test tool)."""
    return Command(update={"messages": [ToolMessage(f"presented {path}", tool_call_id="cmd")]})


async def _run(
    calls: list[dict[str, Any]], tmp_path: Path, tools: list[Any] | None = None
) -> dict[str, Any]:
    model = StrictRecordingModel.play([{"tool_calls": calls}, {"content": "carried on"}])
    agent = make_agent(model, tools or [explode, present], settings=settings_for(tmp_path))
    return await agent.ainvoke({"messages": [HumanMessage("go")]}, run_config())


def _result(result: dict[str, Any], call_id: str) -> ToolMessage:
    return next(
        m for m in result["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == call_id
    )


@pytest.mark.parametrize(
    ("kind", "error_type", "recoverable"),
    [
        ("value", "tool_error", True),
        ("missing", "not_found", True),
        ("timeout", "timeout", True),
        ("memory", "internal_error", False),
    ],
)
async def test_exceptions_become_error_results_and_the_run_continues(
    tmp_path: Path, kind: str, error_type: str, recoverable: bool
) -> None:
    result = await _run([{"name": "explode", "args": {"kind": kind}, "id": "e"}], tmp_path)
    assert result["messages"][-1].content == "carried on"
    message = _result(result, "e")
    assert message.status == "error"
    meta = message.additional_kwargs[TOOL_META_KEY]
    assert meta["status"] == "error" and meta["error_type"] == error_type
    assert meta["recoverable_by_model"] is recoverable
    assert meta["source"] == "tool_error_handling"
    assert meta["recommended_next_action"] in message.content
    assert len(message.content) < 2_500  # bounded, no traceback


async def test_success_and_command_results_are_stamped(tmp_path: Path) -> None:
    result = await _run(
        [{"name": "present", "args": {"path": "/mnt/user-data/outputs/a"}, "id": "cmd"}], tmp_path
    )
    meta = _result(result, "cmd").additional_kwargs[TOOL_META_KEY]
    assert meta == {
        "status": "success",
        "error_type": None,
        "recoverable_by_model": True,
        "recommended_next_action": None,
        "source": "tool",
    }


async def test_invalid_arguments_and_unknown_tools(tmp_path: Path) -> None:
    result = await _run(
        [
            {"name": "explode", "args": {"wrong": 1}, "id": "bad_args"},
            {"name": "no_such_tool", "args": {}, "id": "unknown"},
        ],
        tmp_path,
    )
    assert (
        _result(result, "bad_args").additional_kwargs[TOOL_META_KEY]["error_type"]
        == "invalid_arguments"
    )
    assert (
        _result(result, "unknown").additional_kwargs[TOOL_META_KEY]["error_type"] == "unknown_tool"
    )


async def test_interrupts_propagate(tmp_path: Path) -> None:
    result = await _run(
        [{"name": "ask", "args": {"question": "which?"}, "id": "q"}], tmp_path, [ask]
    )
    assert result["__interrupt__"][0].value == {"question": "which?"}


def test_normalize_keeps_valid_meta_and_replaces_malformed() -> None:
    guard = normalize_tool_result(
        ToolMessage("blocked", tool_call_id="1"), error_type="blocked", source="sandbox_audit"
    )
    assert guard.status == "error"
    again = normalize_tool_result(guard, source="tool")
    assert again.additional_kwargs[TOOL_META_KEY]["source"] == "sandbox_audit"
    malformed = ToolMessage(
        "ok", tool_call_id="2", additional_kwargs={TOOL_META_KEY: {"status": 3}}
    )
    assert read_tool_meta(malformed) is None
    fixed = normalize_tool_result(malformed)
    assert fixed.additional_kwargs[TOOL_META_KEY]["status"] == "success"
    mismatch = ToolMessage(
        "x",
        tool_call_id="3",
        additional_kwargs={TOOL_META_KEY: guard.additional_kwargs[TOOL_META_KEY]},
    )
    assert normalize_tool_result(mismatch).status == "error"
