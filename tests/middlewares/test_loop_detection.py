"""LoopDetectionMiddleware through real create_agent runs with a scripted model."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from middlewares.loop_detection import (
    LOOP_STOP_REASON,
    LoopDetectionMiddleware,
    tool_call_fingerprint,
)
from runtime.state import ThreadState
from tests.support.strict_provider import StrictRecordingModel
from tests.support.tools import echo


def _repeat(n: int, text: str = "same", *, then: str = "Final answer.") -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "args": {"text": text}}]} for _ in range(n)
    ]
    return [*turns, {"content": then}]


def _agent(model: StrictRecordingModel, middleware: LoopDetectionMiddleware) -> Any:
    return create_agent(
        model,
        [echo],
        middleware=[middleware],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )


def _config(thread: str, run: str = "r1") -> RunnableConfig:
    return {"configurable": {"thread_id": thread}, "metadata": {"run_id": run}}


async def test_warning_reaches_next_request_after_tool_results() -> None:
    model = StrictRecordingModel.model_validate({"script": _repeat(3)})
    agent = _agent(model, LoopDetectionMiddleware(warn_threshold=3, hard_limit=5))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, _config("t-warn"))
    assert result["messages"][-1].content == "Final answer."
    # The 3rd identical call crosses the threshold: the 4th request carries the
    # reminder, placed after the tool results, and only once.
    fourth = model.requests[3]
    assert isinstance(fourth[-2], ToolMessage)
    assert isinstance(fourth[-1], HumanMessage) and "Loop warning" in fourth[-1].text
    assert all("Loop warning" not in m.text for r in model.requests[:3] for m in r)
    # Request-local: the reminder never enters state.
    assert all("Loop warning" not in m.text for m in result["messages"])


async def test_hard_limit_removes_calls_and_stamps_stop_reason() -> None:
    model = StrictRecordingModel.model_validate({"script": _repeat(8)})
    agent = _agent(model, LoopDetectionMiddleware(warn_threshold=2, hard_limit=4))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, _config("t-hard"))
    last = result["messages"][-1]
    assert isinstance(last, AIMessage)
    assert last.tool_calls == [] and "Stopped" in last.text
    assert last.additional_kwargs["stop_reason"] == LOOP_STOP_REASON
    tool_results = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert len(tool_results) == 3  # the 4th identical call never ran
    assert len(model.requests) == 4


async def test_different_arguments_are_not_a_loop() -> None:
    script = [{"tool_calls": [{"name": "echo", "args": {"text": f"v{i}"}}]} for i in range(6)]
    model = StrictRecordingModel.model_validate({"script": [*script, {"content": "done"}]})
    agent = _agent(model, LoopDetectionMiddleware(warn_threshold=2, hard_limit=3))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, _config("t-diff"))
    assert result["messages"][-1].content == "done"


async def test_tool_frequency_brake() -> None:
    script = [{"tool_calls": [{"name": "echo", "args": {"text": f"v{i}"}}]} for i in range(10)]
    model = StrictRecordingModel.model_validate({"script": [*script, {"content": "done"}]})
    middleware = LoopDetectionMiddleware(
        warn_threshold=5, hard_limit=9, tool_frequency_warn=2, tool_frequency_hard=4
    )
    result = await _agent(model, middleware).ainvoke(
        {"messages": [HumanMessage("go")]}, _config("t-freq")
    )
    last = result["messages"][-1]
    assert last.additional_kwargs["stop_reason"] == LOOP_STOP_REASON
    assert sum(isinstance(m, ToolMessage) for m in result["messages"]) == 3


async def test_new_run_on_same_thread_gets_fresh_budget() -> None:
    middleware = LoopDetectionMiddleware(warn_threshold=2, hard_limit=3)
    model = StrictRecordingModel.model_validate(
        {"script": [*_repeat(2, then="first done"), *_repeat(2, then="second done")]}
    )
    agent = _agent(model, middleware)
    config = _config("t-runs", run="run-a")
    first = await agent.ainvoke({"messages": [HumanMessage("one")]}, config)
    assert first["messages"][-1].content == "first done"
    second = await agent.ainvoke({"messages": [HumanMessage("two")]}, _config("t-runs", "run-b"))
    # Two more identical calls in the new run: below the hard limit of 3 again.
    assert second["messages"][-1].content == "second done"
    # Same (thread, run) re-entered without a run id reset still starts fresh:
    third_model = StrictRecordingModel.model_validate({"script": _repeat(2, then="third")})
    third = await _agent(third_model, middleware).ainvoke(
        {"messages": [HumanMessage("x")]}, _config("t-runs", "run-a")
    )
    assert third["messages"][-1].content == "third"


async def test_events_carry_no_arguments() -> None:
    model = StrictRecordingModel.model_validate({"script": _repeat(5, text="secret-arg")})
    agent = _agent(model, LoopDetectionMiddleware(warn_threshold=2, hard_limit=4))
    events: list[dict[str, Any]] = []
    async for mode, chunk in agent.astream(
        {"messages": [HumanMessage("go")]}, _config("t-events"), stream_mode=["custom", "values"]
    ):
        if mode == "custom":
            events.append(chunk)
    phases = [(e["type"], e["phase"]) for e in events]
    assert phases == [
        ("middleware:loop_detection", "warned"),
        ("middleware:loop_detection", "hard_stop"),
    ]
    assert "secret-arg" not in repr(events)
    fingerprint = tool_call_fingerprint("echo", {"text": "secret-arg"})
    assert fingerprint not in repr(events)


def test_malformed_arguments_hash_without_raising() -> None:
    class Weird:
        def __repr__(self) -> str:
            return "weird"

    assert tool_call_fingerprint("x", {"a": Weird()}) == tool_call_fingerprint("x", {"a": Weird()})
    assert tool_call_fingerprint("x", "not a dict")


def test_invalid_thresholds_are_refused() -> None:
    with pytest.raises(ValueError, match="warn_threshold"):
        LoopDetectionMiddleware(warn_threshold=5, hard_limit=5)


def test_sync_run() -> None:
    @tool("echo")
    def sync_echo(text: str) -> str:
        """Return the text (sync)."""
        return text

    model = StrictRecordingModel.model_validate({"script": _repeat(6)})
    agent = create_agent(
        model,
        [sync_echo],
        middleware=[LoopDetectionMiddleware(warn_threshold=2, hard_limit=3)],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    result = agent.invoke({"messages": [HumanMessage("go")]}, _config("t-sync"))
    assert result["messages"][-1].additional_kwargs["stop_reason"] == LOOP_STOP_REASON


async def test_warning_arrives_with_receipts_outermost() -> None:
    """Issue 19.1: ToolReceipt (outer) appends its hidden ledger after the tool results."""
    from middlewares.tool_receipt import ToolReceiptMiddleware

    model = StrictRecordingModel.model_validate({"script": _repeat(3)})
    agent = create_agent(
        model,
        [echo],
        middleware=[
            ToolReceiptMiddleware(),
            LoopDetectionMiddleware(warn_threshold=3, hard_limit=5),
        ],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, _config("t-receipts"))
    assert result["messages"][-1].content == "Final answer."
    fourth = model.requests[3]
    assert "tool_receipts" in fourth[-2].text  # the ledger, then the warning
    assert isinstance(fourth[-1], HumanMessage) and "Loop warning" in fourth[-1].text
    assert all("Loop warning" not in m.text for m in result["messages"])
