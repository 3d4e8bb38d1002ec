"""DynamicContextMiddleware (spec 000, number 17): today's date outside the system prompt.

The system prompt stays byte-stable so providers' prefix caches keep working;
the date rides the message stream as a hidden reminder in a
``<system-reminder>`` envelope, stamped with server-owned provenance
(``dynamic_context_reminder`` from ``dynamic_context``) and ``hide_from_ui``.

The reminder is **request-only**: ``wrap_model_call`` adds it to each model
request and it never enters state, so persisted history (what clients list,
count and index) holds only what the user and the agent wrote, and the
middleware can be installed always, as the spec has it (003). For the lead it
is a ``HumanMessage`` placed right before the first user-authored message, so
the request prefix stays stable for the whole day. For subagents
(``date_only_system=True``) it is a ``SystemMessage`` that the
SystemMessageCoalescing middleware registered right after it merges into the
single leading system block (spec 30). The date follows server-local time
unless ``DEER_FLOW_DATE_TIMEZONE`` names an IANA zone (an invalid name falls
back to local time).

Older checkpoints may still hold reminders this middleware persisted before it
became request-only; a request that already carries today's reminder gets no
second one.

With long-term memory on (``memory``), the lead's requests also get the user's
most relevant memories (``memory.recall``), as a hidden, request-only block with
provenance ``dynamic_context_memory`` right before the latest user message:
built once per run, off the event loop where it costs CPU, within the recall
timeout. A run that opts out keeps the date and drops the memory.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import date, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from auth.identity import resolve_runtime_user_id
from deerflow_extension_api.provenance import ContentKind, ProducerKind, provenance_kwargs
from memory.recall import MemoryRecall, recall_block
from middlewares._prefix_fold import PrefixFold, prefix_latest
from middlewares._run_scope import current_run_key
from middlewares._text import content_text

__all__ = ["REMINDER_KEY", "DynamicContextMiddleware", "date_timezone"]

logger = logging.getLogger(__name__)

REMINDER_KEY = "dynamic_context_reminder"
TIMEZONE_ENV = "DEER_FLOW_DATE_TIMEZONE"
_MAX_CACHED_RECALLS = 256


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


# Fold state over a history: (messages seen, index of the first user-authored
# message or -1, dates of the date reminders present).
_DateScan = tuple[int, int, frozenset[str]]


def _date_step(state: _DateScan, message: BaseMessage) -> _DateScan:
    position, first_user, dates = state
    kwargs = message.additional_kwargs
    if kwargs and REMINDER_KEY in kwargs:
        date = _reminder_date(message)
        if date is not None and date not in dates:
            dates = dates | {date}
    if first_user < 0 and _user_authored(message):
        first_user = position
    return position + 1, first_user, dates


# Both questions are asked of the whole request before every model call.
_date_scan: PrefixFold[_DateScan] = PrefixFold((0, -1, frozenset()), _date_step)
_latest_user_authored = prefix_latest(_user_authored)


class DynamicContextMiddleware(AgentMiddleware[Any, Any]):
    """Add the date to every model request as hidden, request-only context.

    Args:
        now: a clock for tests (timezone-aware or naive); defaults to the wall clock.
        date_only_system: subagents: send the reminder as a ``SystemMessage`` for
            the coalescer to merge into the single leading system block.
        memory: how to recall the user's long-term memory into each request
            (None: no memory).

    Example::

        create_agent(model, tools, middleware=[DynamicContextMiddleware()])
    """

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        now: Callable[[], datetime] | None = None,
        date_only_system: bool = False,
        memory: MemoryRecall | None = None,
    ) -> None:
        super().__init__()
        self._now = now
        self.date_only_system = date_only_system
        self._memory = memory
        self._recalls: OrderedDict[tuple[str, str], HumanMessage | None] = OrderedDict()
        self._cache: tuple[tuple[date, str], HumanMessage | SystemMessage] | None = None

    def release_policy_parameters(self) -> dict[str, Any]:
        zone = os.environ.get(TIMEZONE_ENV, "").strip() or None
        memory = None
        if self._memory is not None:
            memory = {
                "limit": self._memory.limit,
                "max_chars": self._memory.max_chars,
                "semantic": self._memory.semantic,
            }
        return {"timezone": zone, "memory": memory, "system": self.date_only_system}

    def _today(self) -> tuple[date, str]:
        zone = date_timezone()
        now = self._now() if self._now is not None else datetime.now(zone)
        if zone is not None and now.tzinfo is not None:
            now = now.astimezone(zone)
        label = zone.key if isinstance(zone, ZoneInfo) else (now.tzname() or "server local time")
        return now.date(), label

    def _reminder(self, today: date, zone: str) -> HumanMessage | SystemMessage:
        """Today's reminder, built once per (date, zone): it is the same every request."""
        key = (today, zone)
        cached = self._cache
        if cached is not None and cached[0] == key:
            return cached[1]
        text = (
            "<system-reminder>\n"
            f"Today's date is {today:%A}, {today.isoformat()} ({zone}).\n"
            "</system-reminder>"
        )
        kwargs = provenance_kwargs(
            ContentKind.DYNAMIC_CONTEXT_REMINDER,
            ProducerKind.DYNAMIC_CONTEXT,
            additional_kwargs={
                "hide_from_ui": True,
                REMINDER_KEY: {"date": today.isoformat(), "kind": "date"},
            },
        )
        message: HumanMessage | SystemMessage = (
            SystemMessage(content=text, **kwargs)
            if self.date_only_system
            else HumanMessage(content=text, **kwargs)
        )
        self._cache = (key, message)
        return message

    def _with_date(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        messages = request.messages
        today, zone = self._today()
        _, first_user, dates = _date_scan(messages)
        if today.isoformat() in dates:
            return request
        reminder = self._reminder(today, zone)
        if self.date_only_system:
            return request.override(messages=[reminder, *messages])
        if first_user < 0:
            return request
        return request.override(messages=[*messages[:first_user], reminder, *messages[first_user:]])

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._with_date(request))

    async def _recall(self, request: ModelRequest[Any], index: int) -> HumanMessage | None:
        assert self._memory is not None
        key = current_run_key()
        if key in self._recalls:
            return self._recalls[key]
        store = getattr(request.runtime, "store", None)
        block = None
        if store is not None:
            block = await recall_block(
                store,
                resolve_runtime_user_id(request.runtime),
                content_text(request.messages[index].content),
                limit=self._memory.limit,
                max_chars=self._memory.max_chars,
                semantic=self._memory.semantic,
                timeout=self._memory.timeout,
            )
        self._recalls[key] = block
        while len(self._recalls) > _MAX_CACHED_RECALLS:
            self._recalls.popitem(last=False)
        return block

    async def _with_memory(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The memory block right before the latest user-authored message (request-only)."""
        _, latest = _latest_user_authored(request.messages)
        if latest < 0:
            return request
        block = await self._recall(request, latest)
        if block is None:
            return request
        messages = list(request.messages)
        messages.insert(latest, block)
        return request.override(messages=messages)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        request = self._with_date(request)
        if self._memory is not None:  # recall needs the async store API: async runs only
            request = await self._with_memory(request)
        return await handler(request)
