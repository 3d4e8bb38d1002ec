"""SubagentLimitMiddleware (spec 31) through real lead-agent graphs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Overwrite

from graphs.lead_agent import build_lead_agent
from middlewares.chain import ChainInputs, build_middlewares
from middlewares.subagent_limit import SubagentLimitMiddleware
from runtime.config import load_settings
from runtime.run_options import resolve_run_options
from subagents.contract import KEY_STATUS
from tests.support.delegation import delegation_config, run_lead, task_call
from tests.support.scripted import ai_text, ai_tools


def _task_ids(message: Any) -> list[str]:
    return [c["id"] for c in message.tool_calls if c["name"] == "task"]


async def test_run_total_strips_excess_calls_and_a_later_run_has_a_fresh_budget(
    tmp_path: Path,
) -> None:
    path = delegation_config(
        tmp_path,
        lead=[
            ai_tools(*(task_call(f"first {i}") for i in range(4)), content="Planning."),
            ai_tools(task_call("more 1"), task_call("more 2")),
            ai_tools(task_call("next 1"), task_call("next 2")),
            ai_text("second run done"),
        ],
        max_total_per_run=3,
    )
    saver = InMemorySaver()
    first = await run_lead(path, thread_id="t", run_id="run-1", checkpointer=saver)
    messages = first.values["messages"]
    planning = messages[1]
    assert isinstance(planning, AIMessage)
    assert len(_task_ids(planning)) == 3
    assert planning.response_metadata["finish_reason"] == "stop"
    assert str(planning.content).startswith("Planning.")
    assert "[Subagent limit] 1 task call was not run" in planning.content
    assert "used all 3 of its subagent delegations" in planning.content
    assert len(first.tool_messages()) == 3
    # The second response is stripped entirely: the run ends with the note visible.
    final = messages[-1]
    assert isinstance(final, AIMessage)
    assert final.tool_calls == []
    assert "[Subagent limit] 2 task calls were not run" in final.content
    assert final.response_metadata["finish_reason"] == "stop"
    run1 = [e for e in first.values["delegations"] if e["run_id"] == "run-1"]
    assert len(run1) == 3
    assert {e["status"] for e in run1} == {"completed"}

    second = await run_lead(path, "again", thread_id="t", run_id="run-2", checkpointer=saver)
    assert second.values["messages"][-1].content == "second run done"
    run2 = [e for e in second.values["delegations"] if e["run_id"] == "run-2"]
    assert len(run2) == 2
    assert {e["status"] for e in run2} == {"completed"}
    assert len(second.values["delegations"]) == 5


async def test_per_response_cap(tmp_path: Path) -> None:
    path = delegation_config(
        tmp_path,
        lead=[ai_tools(*(task_call(f"t{i}") for i in range(3))), ai_text("done")],
        max_tasks_per_response=2,
        max_total_per_run=10,
    )
    run = await run_lead(path)
    planning = run.values["messages"][1]
    assert len(_task_ids(planning)) == 2
    assert "at most 2 task calls run per response" in planning.content
    assert len(run.tool_messages()) == 2
    assert run.values["messages"][-1].content == "done"


async def test_run_override_of_the_total_is_clamped(tmp_path: Path) -> None:
    path = delegation_config(
        tmp_path,
        lead=[ai_tools(task_call("a"), task_call("b")), ai_text("done")],
    )
    run = await run_lead(path, configurable={"max_total_subagents": 0})
    assert len(run.tool_messages()) == 1  # clamped up to 1, not 0
    assert "used all 1 of its subagent delegations" in run.values["messages"][1].content


async def test_stripping_removes_every_trace_of_the_dropped_calls(tmp_path: Path) -> None:
    blocks = [
        {"type": "text", "text": "Let me delegate."},
        {"type": "tool_use", "id": "call_0_0", "name": "task", "input": {}},
        {"type": "tool_use", "id": "call_0_1", "name": "task", "input": {}},
    ]
    raw = [{"id": "call_0_0", "type": "function"}, {"id": "call_0_1", "type": "function"}]
    middleware = SubagentLimitMiddleware(_limits(total=1))
    message = AIMessage(
        content=blocks,  # type: ignore[arg-type]
        tool_calls=[
            {"name": "task", "args": task_call("a")["args"], "id": "call_0_0"},
            {"name": "task", "args": task_call("b")["args"], "id": "call_0_1"},
        ],
        additional_kwargs={"tool_calls": raw},
        response_metadata={"finish_reason": "tool_calls"},
        id="ai-1",
    )
    update = await middleware.aafter_model({"messages": [message]}, None)  # type: ignore[arg-type]
    assert update is not None
    (stripped,) = update["messages"]
    assert stripped.id == "ai-1"
    assert [c["id"] for c in stripped.tool_calls] == ["call_0_0"]
    assert [c["id"] for c in stripped.additional_kwargs["tool_calls"]] == ["call_0_0"]
    ids = [b.get("id") for b in stripped.content if b.get("type") == "tool_use"]
    assert ids == ["call_0_0"]
    assert stripped.content[-1]["type"] == "text"
    assert "[Subagent limit]" in stripped.content[-1]["text"]
    assert stripped.response_metadata["finish_reason"] == "stop"
    (entry,) = update["delegations"]
    assert entry["tool_call_id"] == "call_0_0"
    assert entry["status"] == "pending"
    # A replay of the same (already captured) response is not counted twice.
    again = await middleware.aafter_model(
        {"messages": [stripped], "delegations": update["delegations"]},  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
    )
    assert again is None


def _limits(*, total: int, per_response: int = 6) -> Any:
    from subagents.limits import SubagentLimits

    return SubagentLimits(max_concurrent=2, max_per_response=per_response, max_total_per_run=total)


async def test_orphans_of_earlier_runs_are_closed_and_malformed_entries_ignored(
    tmp_path: Path,
) -> None:
    path = delegation_config(
        tmp_path,
        # Two AI messages are already in the history, so the script starts at turn 2.
        lead=[
            ai_text("-"),
            ai_text("-"),
            ai_tools(task_call("a"), task_call("b")),
            ai_text("done"),
        ],
        max_total_per_run=2,
    )
    settings = load_settings(path)
    config: dict[str, Any] = {"configurable": {"thread_id": "t", "run_id": "new"}}
    graph = build_lead_agent(settings, config)  # type: ignore[arg-type]
    graph.checkpointer = InMemorySaver()
    settled_reply = ToolMessage(
        "Task completed.",
        tool_call_id="old-settled",
        additional_kwargs={KEY_STATUS: "completed"},
    )
    legacy_reply = ToolMessage("Task Succeeded. Result: looks done", tool_call_id="old-legacy")
    history = [
        HumanMessage("earlier"),
        AIMessage(
            "",
            tool_calls=[
                {"name": "task", "args": {}, "id": "old-settled"},
                {"name": "task", "args": {}, "id": "old-legacy"},
            ],
        ),
        settled_reply,
        legacy_reply,
        AIMessage("earlier answer"),
    ]
    ledger = [
        {"run_id": "old", "tool_call_id": "old-orphan", "status": "running"},
        {"run_id": "old", "tool_call_id": "old-settled", "status": "pending"},
        {"run_id": "old", "tool_call_id": "old-legacy", "status": "pending"},
        {"run_id": None, "tool_call_id": "no-run", "status": "pending"},
        {"run_id": "new", "tool_call_id": 7, "status": "completed"},
        {"run_id": "new", "tool_call_id": "x", "status": "finished"},
        "garbage",
    ]
    # Persisted values arrive unchecked (Overwrite bypasses the reducer, as a
    # client's state write or an old checkpoint could).
    inputs: dict[str, Any] = {
        "messages": [*history, HumanMessage("go")],
        "delegations": Overwrite(ledger),
    }
    result = await graph.ainvoke(inputs, config)  # type: ignore[call-overload]
    entries = result["delegations"]
    by_id = {e["tool_call_id"]: e for e in entries if isinstance(e, dict) and "status" in e}
    assert by_id["old-orphan"]["status"] == "cancelled"
    assert "ended before the task finished" in by_id["old-orphan"]["error"]
    assert by_id["old-settled"]["status"] == "completed"
    assert by_id["old-legacy"]["status"] == "pending"  # never inferred from reply text
    assert by_id["no-run"]["status"] == "pending"
    # Malformed entries are kept (nothing lost) but neither counted nor trusted:
    # both task calls of the new run ran within its budget of 2.
    assert "garbage" in entries
    assert {"run_id": "new", "tool_call_id": 7, "status": "completed"} in entries
    new_run = [
        e
        for e in entries
        if isinstance(e, dict)
        and e.get("run_id") == "new"
        and isinstance(e.get("tool_call_id"), str)
        and e["tool_call_id"].startswith("call_")
    ]
    assert [e["status"] for e in new_run] == ["completed", "completed"]
    assert result["messages"][-1].content == "done"


def test_in_the_chain_only_when_subagents_are_enabled(tmp_path: Path) -> None:
    settings = load_settings(delegation_config(tmp_path, lead=[ai_text("x")]))
    entry = settings.default_model

    def chain(configurable: dict[str, Any]) -> list[Any]:
        options = resolve_run_options({"configurable": configurable})
        effective = options.effective(subagents_default=settings.subagents.enabled)
        inputs = ChainInputs(settings=settings, options=options, model=entry, effective=effective)
        return build_middlewares(inputs)

    assert any(isinstance(m, SubagentLimitMiddleware) for m in chain({}))
    assert not any(
        isinstance(m, SubagentLimitMiddleware) for m in chain({"subagent_enabled": False})
    )
    (limit,) = [
        m for m in chain({"max_total_subagents": 99}) if isinstance(m, SubagentLimitMiddleware)
    ]
    assert limit.release_policy_parameters()["max_total_per_run"] == 50


async def test_odd_blocks_and_every_call_form_are_handled(tmp_path: Path) -> None:
    """Issue 19.4: an unhashable block type never crashes; every form of a dropped call goes."""
    blocks = [
        {"type": [], "text": "odd"},
        {"type": {}, "id": "call_0_1"},
        {"type": "server_tool_use", "id": "call_0_1", "name": "task", "input": {}},
        {"type": "function_call", "call_id": "call_0_1", "id": "call_0_1", "name": "task"},
        {"type": "tool_use", "id": "call_0_0", "name": "task", "input": {}},
    ]
    middleware = SubagentLimitMiddleware(_limits(total=1))
    message = AIMessage(
        content=blocks,  # type: ignore[arg-type]
        tool_calls=[
            {"name": "task", "args": task_call("a")["args"], "id": "call_0_0"},
            {"name": "task", "args": task_call("b")["args"], "id": "call_0_1"},
        ],
        invalid_tool_calls=[
            {
                "name": "task",
                "args": "{bad",
                "id": "call_0_1",
                "error": None,
                "type": "invalid_tool_call",
            }
        ],
        additional_kwargs={"function_call": {"name": "task", "arguments": "{}"}},
        id="ai-odd",
    )
    update = await middleware.aafter_model({"messages": [message]}, None)  # type: ignore[arg-type]
    assert update is not None
    (stripped,) = update["messages"]
    assert [c["id"] for c in stripped.tool_calls] == ["call_0_0"]
    assert stripped.invalid_tool_calls == []
    left = [b for b in stripped.content if isinstance(b, dict) and b.get("id") == "call_0_1"]
    assert left == [{"type": {}, "id": "call_0_1"}], "only the odd, non-call block is kept"
    assert {"type": [], "text": "odd"} in stripped.content
    assert "[Subagent limit]" in stripped.content[-1]["text"]


def test_remote_messages_with_odd_types_are_skipped() -> None:
    """Issue 19.4: subagents/messages.py reads remote JSON; an unhashable type is not a crash."""
    from subagents.messages import ai_messages, final_text

    remote = [
        {"type": [], "content": "x"},
        {"type": {"a": 1}, "content": "y"},
        {"type": "ai", "content": [{"type": []}, {"type": "text", "text": "done"}]},
    ]
    assert len(ai_messages(remote)) == 1
    assert final_text(remote) == "done"
