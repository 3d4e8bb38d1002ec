"""Receipt citations (spec 15): snapshot validation, parsing, verification against evidence."""

from __future__ import annotations

import json
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
    receipt_ref,
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
    snapshot = ledger_snapshot(first, [receipt_ref(r) for r in receipts], first - 1)
    if legacy:
        snapshot = {
            "ids": [f"r{first + i}" for i in range(len(receipts))],
            "receipts": [{"id": f"r{first + i}", **r} for i, r in enumerate(receipts)],
            "omitted": first - 1,
        }
    return AIMessage(text, additional_kwargs={RECEIPT_LEDGER_KEY: snapshot})


def test_the_snapshot_references_receipts_in_two_strings() -> None:
    tools = [_tool("c1", "alpha"), _tool('c "2"', "beta")]  # a call id may hold anything
    raw = _answer("x", tools, first=7).additional_kwargs[RECEIPT_LEDGER_KEY]
    shas = [t.additional_kwargs[RECEIPT_KEY]["output_sha256"] for t in tools]
    assert raw["ids"] == "r7-r8" and raw["omitted"] == 6
    assert json.loads(raw["refs"]) == [[shas[0], "c1", "echo"], [shas[1], 'c "2"', "echo"]]
    assert _answer("x", tools[:1]).additional_kwargs[RECEIPT_LEDGER_KEY]["ids"] == "r1"
    snapshot = read_ledger_snapshot(_answer("x", tools, first=7))
    assert snapshot is not None and sorted(snapshot.receipts) == [7, 8]
    assert snapshot.receipts[8] == {
        "tool": "echo",
        "tool_call_id": 'c "2"',
        "output_sha256": shas[1],
    }


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
        {"ids": "r1", "refs": json.dumps([["a" * 64, "c1", "x"]] * 2)},  # count mismatch
        {"ids": "r1-r2", "refs": json.dumps([["a" * 64, "c1", "x"]])},
        {"ids": "r2-r1", "refs": "[]"},  # not increasing
        {"ids": "r0", "refs": json.dumps([["a" * 64, "c1", "x"]])},  # not positive
        {"ids": "r" + "9" * 40, "refs": "[]"},  # oversized id
        {"ids": "r1", "refs": json.dumps([["A" * 64, "c1", "x"]])},  # not a sha256
        {"ids": "r1", "refs": json.dumps([["a" * 64, "", "x"]])},  # empty call id
        {"ids": "r1", "refs": json.dumps([["a" * 64, "c1"]])},  # short reference
        {"ids": "r1", "refs": "[not json"},
        {"ids": "r1", "refs": [["a" * 64, "c1", "x"]]},  # not the packed string
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
