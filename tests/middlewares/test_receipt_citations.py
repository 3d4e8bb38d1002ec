"""Receipt citations (spec 15): snapshot validation, parsing, verification against evidence."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from middlewares.tool_receipt import (
    RECEIPT_KEY,
    RECEIPT_LEDGER_KEY,
    ledger_snapshot,
    make_receipt,
    parse_citations,
    read_ledger_snapshot,
    verify_citations,
)
from subagents.messages import terminal_citations

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def _tool(call_id: str, text: str) -> ToolMessage:
    message = ToolMessage(text, tool_call_id=call_id, name="echo")
    receipt = make_receipt(message, tool_name="echo", args={"t": text}, timestamp=NOW)
    return message.model_copy(update={"additional_kwargs": {RECEIPT_KEY: receipt}})


def _answer(
    text: str, tools: list[ToolMessage], first: int = 1, *, legacy: bool = False
) -> AIMessage:
    """An answer with the snapshot the middleware writes (or, ``legacy``, receipt copies)."""
    receipts = [m.additional_kwargs[RECEIPT_KEY] for m in tools]
    numbered = [(first + i, r) for i, r in enumerate(receipts)]
    snapshot = ledger_snapshot(numbered, first - 1)
    if legacy:
        snapshot = {
            "ids": snapshot["ids"],
            "receipts": [{"id": f"r{n}", **r} for n, r in numbered],
            "omitted": first - 1,
        }
    return AIMessage(text, additional_kwargs={RECEIPT_LEDGER_KEY: snapshot})


def test_the_snapshot_references_receipts_instead_of_copying_them() -> None:
    tools = [_tool("c1", "alpha"), _tool("c 2", "beta")]  # a call id may hold a space
    raw = _answer("x", tools).additional_kwargs[RECEIPT_LEDGER_KEY]
    sha = tools[1].additional_kwargs[RECEIPT_KEY]["output_sha256"]
    assert raw == {
        "ids": ["r1", "r2"],
        "refs": [f"{tools[0].additional_kwargs[RECEIPT_KEY]['output_sha256']} c1", f"{sha} c 2"],
        "tools": ["echo", "echo"],
        "omitted": 0,
    }
    snapshot = read_ledger_snapshot(_answer("x", tools))
    assert snapshot is not None
    assert snapshot.receipts[2] == {"tool": "echo", "tool_call_id": "c 2", "output_sha256": sha}


def test_snapshot_accepts_a_consecutive_range_not_starting_at_r1() -> None:
    tools = [_tool("c1", "alpha"), _tool("c2", "beta")]
    snapshot = read_ledger_snapshot(_answer("x", tools, first=24))
    assert snapshot is not None and sorted(snapshot.receipts) == [24, 25]
    assert snapshot.omitted == 23


@pytest.mark.parametrize(
    "raw",
    [
        {"ids": ["r1", "r3"], "receipts": [{}, {}]},  # gap
        {"ids": ["r2", "r1"], "receipts": [{}, {}]},  # not increasing
        {"ids": ["r0"], "receipts": [{}]},  # not positive
        {"ids": ["r1"], "receipts": []},  # length mismatch
        {"ids": ["r" + "9" * 40], "receipts": [{}]},  # oversized id
        {"ids": [["r1"]], "receipts": [{}]},  # odd shape
        {"ids": ["r1"], "receipts": [{"tool": "x"}]},  # malformed receipt
        {"ids": ["r1"], "receipts": [{}], "omitted": -1},
        {"ids": ["r1"], "refs": ["a" * 64 + " c1"]},  # tools missing
        {"ids": ["r1"], "refs": ["a" * 64 + " c1", "b" * 64 + " c2"], "tools": ["x", "y"]},
        {"ids": ["r1"], "refs": ["A" * 64 + " c1"], "tools": ["x"]},  # not a sha256
        {"ids": ["r1"], "refs": ["a" * 64 + "-c1"], "tools": ["x"]},  # no separator
        {"ids": ["r1"], "refs": ["a" * 64 + " "], "tools": ["x"]},  # empty call id
        {"ids": ["r1"], "refs": [7], "tools": ["x"]},
        "not a mapping",
    ],
)
def test_malformed_snapshots_are_refused(raw: Any) -> None:
    message = AIMessage("x", additional_kwargs={RECEIPT_LEDGER_KEY: raw})
    assert read_ledger_snapshot(message) is None


def test_citations_are_digit_bounded_and_deduped_by_id_and_anchor() -> None:
    text = (
        "See [r1] and [r1] again, [r1: alpha] twice [r1: alpha], [r1: beta], "
        f"and a huge [r{'9' * 400}] plus [r2]."
    )
    cited = [(c.display_id, c.anchor) for c in parse_citations(text)]
    assert cited == [("r1", None), ("r1", "alpha"), ("r1", "beta"), ("r2", None)]


@pytest.mark.parametrize("legacy", [False, True], ids=["references", "legacy-copies"])
def test_verification_against_the_ledger_the_turn_saw(legacy: bool) -> None:
    tools = [_tool("c1", "alpha value 42"), _tool("c2", "beta")]
    text = "[r24: value 42] [r24: nope] [r25] [r26] [r99999999999]"
    answer = _answer(text, tools, first=24, legacy=legacy)
    report = verify_citations(answer.text, read_ledger_snapshot(answer), [*tools, answer])
    statuses = [(c["id"], c.get("anchor"), c["status"]) for c in report["citations"]]
    assert statuses == [
        ("r24", "value 42", "verified"),
        ("r24", "nope", "anchor_not_found"),
        ("r25", None, "verified"),
        ("r26", None, "unknown_id"),
    ]
    assert report["verified"] == 2 and report["unverified"] == 2
    # Evidence that changed (or was summarized away) no longer verifies.
    changed = _tool("c1", "something else")
    again = verify_citations("[r24]", read_ledger_snapshot(answer), [changed, tools[1]])
    assert again["citations"][0]["status"] == "evidence_missing"
    assert verify_citations("[r1]", None, tools)["citations"][0]["status"] == "no_ledger"


def test_terminal_citations_read_remote_json_too() -> None:
    tools = [_tool("c1", "alpha")]
    answer = _answer("Done [r1: alpha].", tools)
    remote = [
        {
            "type": "tool",
            "content": "alpha",
            "tool_call_id": "c1",
            "additional_kwargs": dict(tools[0].additional_kwargs),
        },
        {"type": "ai", "content": answer.text, "additional_kwargs": answer.additional_kwargs},
    ]
    report = terminal_citations(remote)
    assert report is not None and report["verified"] == 1
    assert terminal_citations([{"type": "ai", "content": "no citations"}]) is None


async def test_a_delegated_answer_carries_its_verified_citations(tmp_path: Path) -> None:
    """Through a real lead run: the subagent cites its receipts; the task result says which hold."""
    from subagents.contract import KEY_CITATIONS
    from tests.support.delegation import delegation_config, run_lead, task_call
    from tests.support.scripted import ai_text, ai_tools, tool_call

    config = delegation_config(
        tmp_path,
        [ai_tools(task_call("check")), ai_text("ok")],
        [
            ai_tools(tool_call("echo", text="forty two")),
            ai_text("It said [r1: forty two], not [r1: seven]; see [r5]."),
        ],
    )
    run = await run_lead(config)
    (task,) = [m for m in run.tool_messages() if m.name == "task"]
    report = task.additional_kwargs[KEY_CITATIONS]
    assert [(c["id"], c["status"]) for c in report["citations"]] == [
        ("r1", "verified"),
        ("r1", "anchor_not_found"),
        ("r5", "unknown_id"),
    ]
