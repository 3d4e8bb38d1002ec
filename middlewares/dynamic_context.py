"""DynamicContextMiddleware (spec 000, number 17): today's date outside the system prompt.

The system prompt stays byte-stable so providers' prefix caches keep working;
the date rides the message stream as a hidden ``HumanMessage`` reminder in a
``<system-reminder>`` envelope, stamped with server-owned provenance
(``dynamic_context_reminder`` from ``dynamic_context``) and ``hide_from_ui``.

It is placed with the ID swap (003): the reminder takes the user message's id,
so the reducer replaces that message in place, and the user's text moves
unchanged to ``{id}__user`` right after it. First turn: a reminder before the
first user-authored message; same day: nothing; a new day: a date-only
reminder before the latest user-authored message. The date follows server-local
time unless ``DEER_FLOW_DATE_TIMEZONE`` names an IANA zone (an invalid name
falls back to local time). Runs once per run, in ``before_agent``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from datetime import date, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from deerflow_extension_api.provenance import ContentKind, ProducerKind, provenance_kwargs

__all__ = ["REMINDER_KEY", "DynamicContextMiddleware", "date_timezone"]

logger = logging.getLogger(__name__)

REMINDER_KEY = "dynamic_context_reminder"
TIMEZONE_ENV = "DEER_FLOW_DATE_TIMEZONE"


def date_timezone() -> tzinfo | None:
    """The configured IANA zone, or None (server-local time) when unset or invalid."""
    name = os.environ.get(TIMEZONE_ENV, "").strip()
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        logger.warning(
            "%s=%r is not an IANA time zone; using server-local time", TIMEZONE_ENV, name
        )
        return None


def _reminder_date(message: BaseMessage) -> str | None:
    marker = (message.additional_kwargs or {}).get(REMINDER_KEY)
    if isinstance(marker, dict) and isinstance(marker.get("date"), str):
        return str(marker["date"])
    return None


def _user_authored(message: BaseMessage) -> bool:
    kwargs = message.additional_kwargs or {}
    return (
        isinstance(message, HumanMessage)
        and not kwargs.get("hide_from_ui")
        and REMINDER_KEY not in kwargs
    )


class DynamicContextMiddleware(AgentMiddleware[Any, Any]):
    """Inject the date as a hidden reminder ahead of the user's message."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(self, *, now: Callable[[], datetime] | None = None) -> None:
        super().__init__()
        self._now = now

    def release_policy_parameters(self) -> dict[str, Any]:
        zone = os.environ.get(TIMEZONE_ENV, "").strip() or None
        return {"timezone": zone, "memory": False}

    def _today(self) -> tuple[date, str]:
        zone = date_timezone()
        now = self._now() if self._now is not None else datetime.now(zone)
        if zone is not None and now.tzinfo is not None:
            now = now.astimezone(zone)
        label = zone.key if isinstance(zone, ZoneInfo) else (now.tzname() or "server local time")
        return now.date(), label

    def _reminder(self, target: BaseMessage, today: date, zone: str) -> HumanMessage:
        text = (
            "<system-reminder>\n"
            f"Today's date is {today:%A}, {today.isoformat()} ({zone}).\n"
            "</system-reminder>"
        )
        return HumanMessage(
            content=text,
            id=target.id,
            **provenance_kwargs(
                ContentKind.DYNAMIC_CONTEXT_REMINDER,
                ProducerKind.DYNAMIC_CONTEXT,
                additional_kwargs={
                    "hide_from_ui": True,
                    REMINDER_KEY: {"date": today.isoformat(), "kind": "date"},
                },
            ),
        )

    def _inject(self, state: Any) -> dict[str, Any] | None:
        messages: Sequence[BaseMessage] = (state or {}).get("messages") or []
        users = [i for i, m in enumerate(messages) if _user_authored(m)]
        if not users:
            return None
        today, zone = self._today()
        dates = [d for m in messages if (d := _reminder_date(m)) is not None]
        if dates and dates[-1] == today.isoformat():
            return None
        index = users[-1] if dates else users[0]
        target = messages[index]
        if not target.id:
            return None
        reminder = self._reminder(target, today, zone)
        moved = target.model_copy(update={"id": f"{target.id}__user"})
        if index == len(messages) - 1:
            # Same id replaces in place; the new id is appended right after it.
            return {"messages": [reminder, moved]}
        rebuilt = [*messages[:index], reminder, moved, *messages[index + 1 :]]
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *rebuilt]}

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._inject(state)

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._inject(state)
