"""ToolReceiptMiddleware: receipts on every result, and the budgeted hidden ledger."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from middlewares.tool_receipt import (
    RECEIPT_KEY,
    RECEIPT_LEDGER_KEY,
    ToolReceiptMiddleware,
    render_receipt_ledger,
)
from middlewares.tool_result_meta import normalize_tool_result
from tests.support.agents import chain_for, make_agent, run_config, settings_for
from tests.support.strict_provider import StrictRecordingModel

FIXED = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@tool
async def echo(text: str) -> str:
    """Echo (test tool)."""
    return f"echo: {text}"


class BlockingGuard(AgentMiddleware[Any, Any]):
    """Stands in for a guard (registered after receipts) that short-circuits a call."""

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if request.tool_call["args"].get("text") == "forbidden":
            blocked = ToolMessage(
                "blocked by policy", tool_call_id=request.tool_call["id"], name="echo"
            )
            return normalize_tool_result(blocked, error_type="blocked", source="guard")
        return await handler(request)


def _chain(tmp_path: Path, **verification: Any) -> list[Any]:
    chain = chain_for(settings_for(tmp_path, verification=verification or {}))
    index = next(i for i, m in enumerate(chain) if isinstance(m, ToolReceiptMiddleware))
    chain[index] = ToolReceiptMiddleware(ledger_max_chars=2_000, now=lambda: FIXED)
    chain.insert(index + 1, BlockingGuard())
    return chain


async def test_receipts_on_results_and_short_circuits(tmp_path: Path) -> None:
    model = StrictRecordingModel.play(
        [
            {
                "tool_calls": [
                    {"name": "echo", "args": {"text": "hi"}, "id": "ok"},
                    {"name": "echo", "args": {"text": "forbidden"}, "id": "no"},
                ]
            },
            {"content": "done"},
        ]
    )
    agent = make_agent(model, [echo], middleware=_chain(tmp_path))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, run_config())
    by_id = {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}
    receipt = by_id["ok"].additional_kwargs[RECEIPT_KEY]
    assert receipt == {
        "tool": "echo",
        "tool_call_id": "ok",
        "status": "success",
        "args_sha256": hashlib.sha256(
            json.dumps({"text": "hi"}, separators=(",", ":")).encode()
        ).hexdigest(),
        "output_sha256": hashlib.sha256(b"echo: hi").hexdigest(),
        "output_bytes": len(b"echo: hi"),
        "timestamp": "2025-01-02T03:04:05+00:00",
    }
    blocked = by_id["no"].additional_kwargs[RECEIPT_KEY]
    assert blocked["status"] == "error"  # the guard's short-circuit is receipted too
    # The ledger rode the second request, hidden, and the answer carries what it saw.
    ledger = model.requests[-1][-1]
    assert isinstance(ledger, HumanMessage) and ledger.additional_kwargs["hide_from_ui"] is True
    assert "r1 echo success" in ledger.content and "r2 echo error" in ledger.content
    answer = result["messages"][-1]
    assert answer.additional_kwargs[RECEIPT_LEDGER_KEY]["ids"] == "r1-r2"
    # The ledger never enters state.
    assert not any(
        RECEIPT_LEDGER_KEY in m.additional_kwargs
        for m in result["messages"]
        if isinstance(m, HumanMessage)
    )


def _receipted(index: int) -> ToolMessage:
    return ToolMessage(
        f"out {index}",
        tool_call_id=f"c{index}",
        additional_kwargs={
            RECEIPT_KEY: {
                "tool": "bash",
                "status": "success",
                "args_sha256": "a" * 64,
                "output_sha256": f"{index:064d}",
                "output_bytes": index,
                "timestamp": "2025-01-01T00:00:00+00:00",
            }
        },
    )


def test_ledger_budget_keeps_newest_with_original_ids() -> None:
    messages: list[Any] = [HumanMessage("go")]
    for index in range(1, 41):
        messages.append(AIMessage("", tool_calls=[{"name": "bash", "args": {}, "id": f"c{index}"}]))
        messages.append(_receipted(index))
    messages.insert(
        5, ToolMessage("bad", tool_call_id="x", additional_kwargs={RECEIPT_KEY: {"tool": 1}})
    )
    ledger = render_receipt_ledger(messages, max_chars=2_000)
    assert ledger is not None
    assert len(ledger.text) <= 2_000
    ids = [entry.display_id for entry in ledger.entries]
    assert ids[-1] == "r40" and ids == [f"r{n}" for n in range(41 - len(ids), 41)]
    assert ledger.omitted == 40 - len(ids) > 0
    assert f"[{ledger.omitted} older receipts omitted]" in ledger.text
    lines = ledger.text.splitlines()
    assert lines[2] == f"[{ledger.omitted} older receipts omitted]"


async def test_receipts_can_be_switched_off(tmp_path: Path) -> None:
    chain = chain_for(settings_for(tmp_path, verification={"receipts_enabled": False}))
    assert not any(isinstance(m, ToolReceiptMiddleware) for m in chain)


def test_the_ledger_of_a_growing_history_equals_one_rendered_from_scratch() -> None:
    """Rendering resumes from the previous history; copies (new objects) render from scratch."""
    messages: list[Any] = [HumanMessage("go")]
    omitted = 0
    for index in range(1, 31):
        messages.append(AIMessage("", tool_calls=[{"name": "bash", "args": {}, "id": f"c{index}"}]))
        messages.append(_receipted(index))
        resumed = render_receipt_ledger(messages, max_chars=1_000)
        fresh = render_receipt_ledger([m.model_copy() for m in messages], max_chars=1_000)
        assert resumed is not None and fresh is not None
        assert (resumed.text, resumed.entries, resumed.omitted, resumed.refs) == (
            fresh.text,
            fresh.entries,
            fresh.omitted,
            fresh.refs,
        )
        omitted = resumed.omitted
    assert omitted > 0
