"""``TaskOutcome``: one set of facts rendered as text, metadata, ledger entry and event."""

from __future__ import annotations

from typing import Any

import pytest

from subagents.contract import (
    KEY_ERROR,
    KEY_MODEL_NAME,
    KEY_STATUS,
    KEY_STOP_REASON,
    KEY_TOKEN_USAGE,
    normalize_token_usage,
    read_task_result_metadata,
)
from subagents.results import TaskOutcome

USAGE = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}


def outcome(**fields: Any) -> TaskOutcome:
    base: dict[str, Any] = {"task_id": "call-1", "status": "completed", "subagent_type": "bash"}
    base.update(fields)
    return TaskOutcome(**base)


@pytest.mark.parametrize(
    ("fields", "text_start", "event"),
    [
        ({"result": "42"}, "Task completed by subagent 'bash'. Result:\n42", "task_completed"),
        (
            {"result": "4", "stop_reason": "turn_capped"},
            "Task completed by subagent 'bash' (stopped early",
            "task_completed",
        ),
        (
            {"status": "failed", "error": "boom"},
            "Task failed (subagent 'bash'). Error: boom",
            "task_failed",
        ),
        (
            {"status": "failed", "stop_reason": "loop_capped"},
            "Task failed (subagent 'bash'): it was stopped",
            "task_failed",
        ),
        (
            {"status": "timed_out", "error": "late"},
            "Task timed out (subagent 'bash'). Error: late",
            "task_timed_out",
        ),
        ({"status": "cancelled"}, "Task cancelled (subagent 'bash').", "task_cancelled"),
    ],
)
def test_text_metadata_and_event_agree(fields: dict[str, Any], text_start: str, event: str) -> None:
    result = outcome(model="worker", token_usage=USAGE, **fields)
    message = result.tool_message()
    assert str(message.content).startswith(text_start)
    assert message.tool_call_id == "call-1"
    assert message.name == "task"
    kwargs = message.additional_kwargs
    assert kwargs[KEY_STATUS] == result.status
    assert kwargs[KEY_MODEL_NAME] == "worker"
    assert kwargs[KEY_TOKEN_USAGE] == USAGE
    assert kwargs.get(KEY_STOP_REASON) == fields.get("stop_reason")
    assert (KEY_ERROR in kwargs) == (result.status != "completed" and bool(result.error))
    assert message.status == ("success" if result.status == "completed" else "error")
    assert result.event()["type"] == event
    assert result.event()["task_id"] == "call-1"
    meta = read_task_result_metadata(kwargs)
    assert meta is not None
    assert meta["status"] == result.status
    entry = result.ledger_entry("run-1")
    assert entry is not None
    assert (entry["run_id"], entry["tool_call_id"], entry["status"]) == (
        "run-1",
        "call-1",
        result.status,
    )


def test_completed_without_text_says_so() -> None:
    assert "(the subagent returned no text)" in outcome().text()


def test_an_unrecordable_task_id_yields_no_ledger_entry() -> None:
    assert outcome(task_id="x" * 1000).ledger_entry("r") is None


@pytest.mark.parametrize(
    "kwargs",
    [None, "x", {}, {KEY_STATUS: "maybe"}, {KEY_STATUS: 1}],
)
def test_unreadable_metadata(kwargs: Any) -> None:
    assert read_task_result_metadata(kwargs) is None


def test_metadata_fields_are_revalidated() -> None:
    meta = read_task_result_metadata(
        {
            KEY_STATUS: "failed",
            KEY_STOP_REASON: "bored",
            KEY_TOKEN_USAGE: {"input_tokens": -1},
            KEY_ERROR: 5,
        }
    )
    assert meta == {"status": "failed"}


@pytest.mark.parametrize(
    "usage",
    [
        None,
        [],
        {"input_tokens": 1},
        {**USAGE, "total_tokens": True},
        {**USAGE, "output_tokens": -2},
        {**USAGE, "input_tokens": "3"},
    ],
)
def test_bad_token_usage(usage: Any) -> None:
    assert normalize_token_usage(usage) is None
