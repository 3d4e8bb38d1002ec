"""The delegation ledger: validation, the reducer, counting and orphan cancellation."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from subagents.contract import KEY_STATUS, KEY_STOP_REASON
from subagents.ledger import (
    cancel_orphaned_delegations,
    count_run_delegations,
    current_run_id,
    merge_delegations,
    read_delegations,
    validate_delegation,
)


def entry(
    tool_call_id: str = "c1", run_id: str | None = "r1", status: str = "pending", **extra: Any
) -> dict[str, Any]:
    return {"run_id": run_id, "tool_call_id": tool_call_id, "status": status, **extra}


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "text",
        [],
        {},
        {"tool_call_id": "", "status": "pending"},
        {"tool_call_id": 3, "status": "pending"},
        {"tool_call_id": "x" * 300, "status": "pending"},
        {"tool_call_id": "c", "status": "done"},
        {"tool_call_id": "c", "status": None},
        {"tool_call_id": "c", "status": "pending", "run_id": 5},
        {"tool_call_id": "c", "status": "pending", "run_id": ""},
    ],
)
def test_malformed_entries_are_rejected(raw: Any) -> None:
    assert validate_delegation(raw) is None


def test_optional_fields_are_checked_and_bounded() -> None:
    valid = validate_delegation(
        entry(
            description="d" * 1000,
            summary=" done ",
            error=["not text"],
            stop_reason="sleepy",
            execution="elsewhere",
            child_thread_id={"x": 1},
            model="worker",
            unknown_field="dropped",
        )
    )
    assert valid is not None
    assert len(valid["description"]) == 200
    assert valid["summary"] == "done"
    assert valid["model"] == "worker"
    for dropped in ("error", "stop_reason", "execution", "child_thread_id", "unknown_field"):
        assert dropped not in valid
    # A missing run id is "unknown", not an error.
    assert validate_delegation({"tool_call_id": "c", "status": "failed"}) == {
        "run_id": None,
        "tool_call_id": "c",
        "status": "failed",
    }


def test_reducer_merges_by_run_and_tool_call_id() -> None:
    ledger = merge_delegations(None, [entry("a"), entry("b")])
    ledger = merge_delegations(ledger, [entry("a", status="completed", summary="ok")])
    ledger = merge_delegations(ledger, [entry("a", run_id="r2")])  # same id, other run
    assert [(e["run_id"], e["tool_call_id"], e["status"]) for e in ledger] == [
        ("r1", "a", "completed"),
        ("r1", "b", "pending"),
        ("r2", "a", "pending"),
    ]
    assert ledger[0]["summary"] == "ok"


def test_a_settled_entry_never_changes_again() -> None:
    ledger = merge_delegations(None, [entry("a", status="timed_out")])
    ledger = merge_delegations(ledger, [entry("a", status="pending")])
    ledger = merge_delegations(ledger, [entry("a", status="completed")])
    assert ledger[0]["status"] == "timed_out"


def test_reducer_keeps_malformed_persisted_entries_and_drops_malformed_updates() -> None:
    ledger = merge_delegations(["junk", {"tool_call_id": 1}], [entry("a"), {"status": "x"}])
    assert ledger[:2] == ["junk", {"tool_call_id": 1}]
    assert len(ledger) == 3
    assert merge_delegations(ledger, "not a list") == ledger
    assert merge_delegations(ledger, entry("b"))[-1]["tool_call_id"] == "b"
    assert [e["tool_call_id"] for e in read_delegations({"delegations": ledger})] == ["a"]
    assert read_delegations({"delegations": "nope"}) == []
    assert read_delegations({}) == []


def test_counting_by_run() -> None:
    entries = read_delegations(
        {"delegations": [entry("a"), entry("b"), entry("c", run_id="r2"), entry("d", run_id=None)]}
    )
    assert count_run_delegations(entries, "r1") == 2
    assert count_run_delegations(entries, "r2") == 1
    assert count_run_delegations(entries, None) == 1


def test_current_run_id() -> None:
    assert current_run_id({"configurable": {"run_id": "r"}}) == "r"
    assert current_run_id({"metadata": {"run_id": "m"}}) == "m"
    assert current_run_id({"configurable": {"run_id": 5}, "metadata": {}}) is None
    assert current_run_id(None) is None


def test_orphans_of_earlier_runs() -> None:
    entries = read_delegations(
        {
            "delegations": [
                entry("orphan", run_id="old"),
                entry("settled", run_id="old", status="running"),
                entry("capped", run_id="old"),
                entry("legacy", run_id="old"),
                entry("done", run_id="old", status="completed"),
                entry("mine", run_id="now"),
                entry("unknown-run", run_id=None),
            ]
        }
    )
    replies = [
        ToolMessage(
            "whatever the text says",
            tool_call_id="settled",
            additional_kwargs={KEY_STATUS: "failed"},
        ),
        ToolMessage(
            "x",
            tool_call_id="capped",
            additional_kwargs={KEY_STATUS: "completed", KEY_STOP_REASON: "turn_capped"},
        ),
        ToolMessage("Task Succeeded. Result: done", tool_call_id="legacy"),
    ]
    updates = {u["tool_call_id"]: u for u in cancel_orphaned_delegations(entries, "now", replies)}
    assert set(updates) == {"orphan", "settled", "capped"}
    assert updates["orphan"]["status"] == "cancelled"
    assert updates["settled"]["status"] == "failed"
    assert updates["capped"]["status"] == "completed"
    assert updates["capped"]["stop_reason"] == "turn_capped"
    assert cancel_orphaned_delegations(entries, None, replies) == []
