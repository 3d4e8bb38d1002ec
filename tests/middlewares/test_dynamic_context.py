"""DynamicContextMiddleware through real agent runs: ID swap, once per day."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from deerflow_extension_api.provenance import read_provenance
from middlewares.dynamic_context import REMINDER_KEY, DynamicContextMiddleware, date_timezone
from runtime.state import ThreadState
from tests.support.strict_provider import StrictRecordingModel


class Clock:
    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


def _agent(clock: Clock, turns: int = 3) -> tuple[Any, StrictRecordingModel]:
    model = StrictRecordingModel.model_validate(
        {"script": [{"content": f"answer {i}"} for i in range(turns)]}
    )
    agent = create_agent(
        model,
        [],
        middleware=[DynamicContextMiddleware(now=clock)],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    return agent, model


def _reminders(messages: list[Any]) -> list[Any]:
    return [m for m in messages if REMINDER_KEY in (m.additional_kwargs or {})]


async def test_first_turn_reminder_takes_the_user_slot() -> None:
    clock = Clock(datetime(2026, 11, 29, 9, 0, tzinfo=UTC))
    agent, model = _agent(clock)
    config = {"configurable": {"thread_id": "d1"}}
    result = await agent.ainvoke({"messages": [HumanMessage("hello", id="u1")]}, config)
    first, second = result["messages"][:2]
    assert first.id == "u1" and "2026-11-29" in first.text and "<system-reminder>" in first.text
    assert first.additional_kwargs["hide_from_ui"] is True
    provenance = read_provenance(first)
    assert provenance is not None
    assert (provenance.content_kind, provenance.producer_kind) == (
        "dynamic_context_reminder",
        "dynamic_context",
    )
    assert second.id == "u1__user" and second.text == "hello"
    # The model saw the reminder before the question; the system prompt is untouched.
    request = model.requests[0]
    assert [m.text for m in request if isinstance(m, HumanMessage)][-2:] == [first.text, "hello"]


async def test_same_day_adds_nothing_and_new_day_adds_date_only() -> None:
    clock = Clock(datetime(2026, 11, 29, 23, 0, tzinfo=UTC))
    agent, _ = _agent(clock)
    config = {"configurable": {"thread_id": "d2"}}
    await agent.ainvoke({"messages": [HumanMessage("one", id="a")]}, config)
    same = await agent.ainvoke({"messages": [HumanMessage("two", id="b")]}, config)
    assert len(_reminders(same["messages"])) == 1
    clock.moment = datetime(2026, 11, 30, 0, 5, tzinfo=UTC)
    later = await agent.ainvoke({"messages": [HumanMessage("three", id="c")]}, config)
    reminders = _reminders(later["messages"])
    assert [r.additional_kwargs[REMINDER_KEY]["date"] for r in reminders] == [
        "2026-11-29",
        "2026-11-30",
    ]
    ids = [m.id for m in later["messages"]]
    assert ids.index("c") + 1 == ids.index("c__user")
    assert isinstance(later["messages"][-1], AIMessage)


async def test_first_user_message_not_last_keeps_order() -> None:
    clock = Clock(datetime(2026, 1, 1, tzinfo=UTC))
    agent, _ = _agent(clock)
    result = await agent.ainvoke(
        {
            "messages": [
                HumanMessage("first", id="m1"),
                AIMessage("prior", id="m2"),
                HumanMessage("next", id="m3"),
            ]
        },
        {"configurable": {"thread_id": "d3"}},
    )
    assert [m.id for m in result["messages"][:4]] == ["m1", "m1__user", "m2", "m3"]


def test_timezone_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEER_FLOW_DATE_TIMEZONE", "Asia/Tokyo")
    zone = date_timezone()
    assert zone is not None and str(zone) == "Asia/Tokyo"
    middleware = DynamicContextMiddleware(now=lambda: datetime(2026, 11, 29, 20, 0, tzinfo=UTC))
    today, label = middleware._today()
    assert today.isoformat() == "2026-11-30" and label == "Asia/Tokyo"
    monkeypatch.setenv("DEER_FLOW_DATE_TIMEZONE", "Not/AZone")
    assert date_timezone() is None
