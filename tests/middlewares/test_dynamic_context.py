"""DynamicContextMiddleware through real agent runs: request-only, every turn, never persisted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
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


async def test_reminder_reaches_every_request_and_never_enters_state() -> None:
    """Issue 19.5: the date reaches the model each turn; persisted history never holds it."""
    clock = Clock(datetime(2026, 11, 29, 9, 0, tzinfo=UTC))
    agent, model = _agent(clock)
    config = {"configurable": {"thread_id": "d1"}}
    await agent.ainvoke({"messages": [HumanMessage("hello", id="u1")]}, config)
    result = await agent.ainvoke({"messages": [HumanMessage("again", id="u2")]}, config)
    assert _reminders(result["messages"]) == []
    assert [m.id for m in result["messages"] if isinstance(m, HumanMessage)] == ["u1", "u2"]
    for request in model.requests:
        (reminder,) = _reminders(request)
        assert "2026-11-29" in reminder.text and "<system-reminder>" in reminder.text
        assert reminder.additional_kwargs["hide_from_ui"] is True
        provenance = read_provenance(reminder)
        assert provenance is not None
        assert (provenance.content_kind, provenance.producer_kind) == (
            "dynamic_context_reminder",
            "dynamic_context",
        )
        # Right before the first user-authored message: a stable prefix all day.
        assert request[request.index(reminder) + 1].text == "hello"


async def test_a_new_day_changes_the_date_and_old_persisted_reminders_are_not_doubled() -> None:
    clock = Clock(datetime(2026, 11, 29, 23, 0, tzinfo=UTC))
    agent, model = _agent(clock)
    config = {"configurable": {"thread_id": "d2"}}
    legacy = HumanMessage(
        "<system-reminder>old</system-reminder>",
        id="old",
        additional_kwargs={"hide_from_ui": True, REMINDER_KEY: {"date": "2026-11-29"}},
    )
    await agent.ainvoke({"messages": [legacy, HumanMessage("one", id="a")]}, config)
    assert len(_reminders(model.requests[0])) == 1, "today's persisted reminder is enough"
    clock.moment = datetime(2026, 11, 30, 0, 5, tzinfo=UTC)
    await agent.ainvoke({"messages": [HumanMessage("two", id="b")]}, config)
    dates = [r.additional_kwargs[REMINDER_KEY]["date"] for r in _reminders(model.requests[1])]
    assert dates == ["2026-11-29", "2026-11-30"]


async def test_subagent_date_is_a_system_message_for_the_coalescer() -> None:
    from middlewares.system_message_coalescing import SystemMessageCoalescingMiddleware

    clock = Clock(datetime(2026, 1, 1, tzinfo=UTC))
    model = StrictRecordingModel.model_validate({"script": [{"content": "ok"}]})
    agent = create_agent(
        model,
        [],
        system_prompt="You are a subagent.",
        middleware=[
            DynamicContextMiddleware(now=clock, date_only_system=True),
            SystemMessageCoalescingMiddleware(),
        ],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    result = await agent.ainvoke(
        {"messages": [HumanMessage("task", id="m1")]}, {"configurable": {"thread_id": "d3"}}
    )
    (request,) = model.requests
    systems = [m for m in request if isinstance(m, SystemMessage)]
    assert len(systems) == 1 and request[0] is systems[0]
    assert "You are a subagent." in systems[0].text and "2026-01-01" in systems[0].text
    assert [m.id for m in result["messages"]][:1] == ["m1"]
    assert _reminders(result["messages"]) == []


def test_timezone_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEER_FLOW_DATE_TIMEZONE", "Asia/Tokyo")
    zone = date_timezone()
    assert zone is not None and str(zone) == "Asia/Tokyo"
    middleware = DynamicContextMiddleware(now=lambda: datetime(2026, 11, 29, 20, 0, tzinfo=UTC))
    today, label = middleware._today()
    assert today.isoformat() == "2026-11-30" and label == "Asia/Tokyo"
    monkeypatch.setenv("DEER_FLOW_DATE_TIMEZONE", "Not/AZone")
    assert date_timezone() is None
