"""DeferredToolPromotionAuditMiddleware (28): one report per new name and execution."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from middlewares import deferred_tool_promotion_audit as audit_module
from middlewares.deferred_tool_promotion_audit import DeferredToolPromotionAuditMiddleware


def search_result(*names: str) -> Command[Any]:
    return Command(
        update={
            "promoted": dict.fromkeys(names, "hash"),
            "messages": [ToolMessage("found", tool_call_id="c1")],
        }
    )


class _Request:
    tool_call = {"name": "tool_search", "id": "c1", "args": {"query": "q"}}


@pytest.mark.parametrize("subagent", [False, True])
def test_new_names_are_reported_once_and_subagents_are_attributed(
    monkeypatch: pytest.MonkeyPatch, subagent: bool
) -> None:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(audit_module, "emit_event", events.append)
    monkeypatch.setattr(audit_module, "is_subagent_run", lambda: subagent)
    audit = DeferredToolPromotionAuditMiddleware()
    first = search_result("add", "report")
    assert audit.wrap_tool_call(_Request(), lambda _: first) is first  # type: ignore[arg-type]
    audit.wrap_tool_call(_Request(), lambda _: search_result("add", "fail"))  # type: ignore[arg-type]
    expected: list[dict[str, Any]] = [
        {"type": "middleware:tool_promotion", "source": "tool_search", "names": ["add", "report"]},
        {"type": "middleware:tool_promotion", "source": "tool_search", "names": ["fail"]},
    ]
    if subagent:
        expected = [{**e, "is_subagent": True} for e in expected]
    assert events == expected
