"""ToolReceiptMiddleware (spec 000, number 15): verifiable provenance of tool results.

Every tool result gets a receipt in ``additional_kwargs["deerflow_tool_receipt"]``:
tool name, status, SHA-256 of the canonical JSON arguments, SHA-256 and UTF-8
byte count of the output text, and a UTC timestamp. Receipts are stamped on
direct ``ToolMessage`` results and on every ``ToolMessage`` answering the call
inside ``Command.update["messages"]`` (delegations, file presentation, tool
search). The middleware is the outermost ``wrap_tool_call`` layer of the guard
segment, registered ahead of the authorization, audit and write gates, so a
gate's short-circuit result is receipted too instead of leaving a gap.

Before each model call a hidden receipt ledger is derived from message state:
display ids ``r1..rN`` in chronological order. When it exceeds the character
budget (2,000 by default) the newest receipts are kept, in order, with their
original ids, after an omission marker. The ledger rides the request only; the
response that saw it is stamped with exactly the ids it saw
(``deerflow_receipt_ledger``), never with omitted ones: each id with a reference
to its receipt (output hash and tool call id), not a copy of it, so the history
does not grow by a ledger per step.

Citations (spec 15): a model cites receipts as ``[r3]`` or with an anchor,
``[r3: exact quoted text]``. ``read_ledger_snapshot`` revalidates a persisted
snapshot (a strictly consecutive positive id range such as ``r24``-``r30``,
each id matching its receipt), ``parse_citations`` keeps digit-bounded ids
only (an oversized id is malformed input, ignored, never an error) and
dedupes exact ``(id, anchor)`` pairs, and ``verify_citations`` checks each
claim against the ledger the citing turn saw: the id must be in it, the
receipted tool result must still be present with the same output hash, and
an anchor must occur in that result's text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from middlewares._identity_cache import IdentityCache
from middlewares._prefix_fold import PrefixFold
from middlewares._tool_results import apply_sized, map_tool_messages, tool_message_text
from middlewares.model_response import last_ai_message, replace_last_ai_message
from middlewares.tool_result_meta import read_tool_meta
from runtime.config import VerificationConfig
from runtime.receipts import (
    MAX_CITATION_DIGITS,
    RECEIPT_FIELDS,
    RECEIPT_KEY,
    RECEIPT_LEDGER_KEY,
    Citation,
    LedgerSnapshot,
    ledger_snapshot,
    parse_citations,
    read_ledger_snapshot,
    receipt_ref,
    verify_citations,
)

__all__ = [
    "MAX_CITATION_DIGITS",
    "RECEIPT_KEY",
    "RECEIPT_LEDGER_KEY",
    "Citation",
    "LedgerEntry",
    "LedgerSnapshot",
    "RenderedLedger",
    "ToolReceiptMiddleware",
    "ledger_snapshot",
    "make_receipt",
    "parse_citations",
    "read_ledger_snapshot",
    "read_receipt",
    "receipt_ref",
    "render_receipt_ledger",
    "verify_citations",
]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical_args(args: Any) -> bytes:
    try:
        text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(args)
    return text.encode("utf-8", "surrogatepass")


def make_receipt(
    message: ToolMessage, *, tool_name: str, args: Any, timestamp: datetime
) -> dict[str, Any]:
    """The receipt for one result (deterministic for the same inputs and time)."""
    meta = read_tool_meta(message)
    status = (
        meta["status"]
        if meta is not None
        else ("error" if message.status == "error" else "success")
    )
    output = tool_message_text(message).encode("utf-8", "surrogatepass")
    return {
        "tool": tool_name,
        "tool_call_id": message.tool_call_id,
        "status": status,
        "args_sha256": _sha256(_canonical_args(args)),
        "output_sha256": _sha256(output),
        "output_bytes": len(output),
        "timestamp": timestamp.astimezone(UTC).isoformat(timespec="seconds"),
    }


_RECEIPT_FIELDS = RECEIPT_FIELDS


_receipts: IdentityCache[dict[str, Any] | None] = IdentityCache()


def read_receipt(message: Any) -> dict[str, Any] | None:
    """A message's receipt if it is well formed (persisted data is revalidated).

    Messages are immutable here, so the verdict is cached per message object.
    """
    if not isinstance(message, ToolMessage):
        return None
    cached = _receipts.get(message)
    if not IdentityCache.missing(cached):
        return dict(cached) if cached is not None else None
    receipt = _read_receipt(message)
    _receipts.put(message, receipt)
    return dict(receipt) if receipt is not None else None


def _read_receipt(message: ToolMessage) -> dict[str, Any] | None:
    raw = (message.additional_kwargs or {}).get(RECEIPT_KEY)
    if not isinstance(raw, Mapping):
        return None
    if not all(isinstance(raw.get(key), str) for key in _RECEIPT_FIELDS):
        return None
    size = raw.get("output_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    return dict(raw)


def _line_tail(receipt: Mapping[str, Any]) -> str:
    return (
        f"{receipt['tool']} {receipt['status']} out={receipt['output_bytes']}B "
        f"sha256:{receipt['output_sha256'][:12]} args:{receipt['args_sha256'][:12]} "
        f"{receipt['timestamp']}"
    )


@dataclass(frozen=True)
class LedgerEntry:
    """One receipt with its display id (``r<number>``)."""

    number: int
    receipt: dict[str, Any]

    @property
    def display_id(self) -> str:
        return f"r{self.number}"


@dataclass(frozen=True)
class RenderedLedger:
    """The ledger text and the exact receipts it shows."""

    text: str
    entries: tuple[LedgerEntry, ...]
    omitted: int
    refs: tuple[str, ...] = ()  # each entry's ``receipt_ref``, for the response's snapshot


# Per ToolMessage object: its validated receipt, ledger line (without the id) and
# snapshot reference, or None. The ledger is rebuilt before every model call.
_LedgerItem = tuple[dict[str, Any], str, str]
_ledger_lines: IdentityCache[_LedgerItem | None] = IdentityCache()


def _ledger_item(message: ToolMessage) -> _LedgerItem | None:
    item = _ledger_lines.get(message)
    if IdentityCache.missing(item):
        receipt = _read_receipt(message)
        item = _ledger_lines.put(
            message,
            None if receipt is None else (receipt, _line_tail(receipt), receipt_ref(receipt)),
        )
    return item  # type: ignore[no-any-return]


_LEDGER_HEADER = (
    "<tool_receipts>\nServer-recorded receipts of this conversation's tool results (cite by id):"
)
_LEDGER_FOOTER = "</tool_receipts>"


# Fold state: the receipts seen so far as a linked list from the newest,
# (count, (receipt, line tail), older) or None; rendering walks back from the newest.
_Receipts = tuple[int, _LedgerItem, Any] | None


def _receipt_step(state: _Receipts, message: Any) -> _Receipts:
    if not isinstance(message, ToolMessage):
        return state
    item = _ledger_item(message)
    if item is None:
        return state
    return (state[0] + 1 if state is not None else 1, item, state)


_receipts_seen: PrefixFold[_Receipts] = PrefixFold(None, _receipt_step)


def render_receipt_ledger(
    messages: Sequence[AnyMessage], *, max_chars: int
) -> RenderedLedger | None:
    """The hidden ledger for ``messages``, newest receipts first to survive the budget."""
    newest = _receipts_seen(messages)
    if newest is None:
        return None
    total = newest[0]
    used = len(_LEDGER_HEADER) + len(_LEDGER_FOOTER) + 2
    kept: list[tuple[int, _LedgerItem]] = []
    node: _Receipts = newest
    while node is not None:
        number, item, older = node
        cost = len(str(number)) + 2 + len(item[1]) + 1
        marker_cost = 60 if len(kept) + 1 < total else 0
        if kept and used + cost + marker_cost > max_chars:
            break
        kept.append((number, item))
        used += cost
        node = older
    kept.reverse()
    omitted = total - len(kept)
    lines = [_LEDGER_HEADER]
    if omitted:
        lines.append(f"[{omitted} older receipts omitted]")
    lines.extend(f"r{number} {item[1]}" for number, item in kept)
    lines.append(_LEDGER_FOOTER)
    entries = tuple(LedgerEntry(number, dict(item[0])) for number, item in kept)
    refs = tuple(item[2] for _, item in kept)
    return RenderedLedger("\n".join(lines), entries, omitted, refs)


class ToolReceiptMiddleware(AgentMiddleware[Any, Any]):
    """Stamp receipts on tool results and show the model a hidden receipt ledger."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        ledger_max_chars: int = 2000,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__()
        self.ledger_max_chars = ledger_max_chars
        self.now = now

    @classmethod
    def from_config(cls, config: VerificationConfig) -> ToolReceiptMiddleware:
        return cls(ledger_max_chars=config.receipt_ledger_max_chars)

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"receipts_enabled": True, "receipt_ledger_max_chars": self.ledger_max_chars}

    # --- tool side --------------------------------------------------------------------

    def _stamp(self, request: ToolCallRequest, result: Any, timestamp: datetime) -> Any:
        name = request.tool_call.get("name") or "tool"
        args = request.tool_call.get("args")

        def stamp(message: ToolMessage) -> ToolMessage:
            receipt = make_receipt(message, tool_name=name, args=args, timestamp=timestamp)
            kwargs = {**(message.additional_kwargs or {}), RECEIPT_KEY: receipt}
            return message.model_copy(update={"additional_kwargs": kwargs})

        return map_tool_messages(result, stamp, tool_call_id=request.tool_call.get("id"))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self._stamp(request, handler(request), self.now())  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        timestamp = self.now()
        return await apply_sized(result, self._stamp, request, result, timestamp)  # type: ignore[no-any-return]

    # --- model side -------------------------------------------------------------------

    def _with_ledger(
        self, request: ModelRequest[Any]
    ) -> tuple[ModelRequest[Any], RenderedLedger | None]:
        ledger = render_receipt_ledger(request.messages, max_chars=self.ledger_max_chars)
        if ledger is None:
            return request, None
        hidden = HumanMessage(
            content=ledger.text,
            additional_kwargs={
                "hide_from_ui": True,
                RECEIPT_LEDGER_KEY: True,
                "deerflow_content_kind": "receipt_ledger",
                "deerflow_producer_kind": "tool_receipt",
            },
        )
        return request.override(messages=[*request.messages, hidden]), ledger

    @staticmethod
    def _mark_response(response: Any, ledger: RenderedLedger | None) -> Any:
        if ledger is None:
            return response
        message = last_ai_message(response)
        if message is None:
            return response
        kwargs = dict(message.additional_kwargs or {})
        refs = ledger.refs or tuple(receipt_ref(entry.receipt) for entry in ledger.entries)
        first = ledger.entries[0].number if ledger.entries else 1
        kwargs[RECEIPT_LEDGER_KEY] = ledger_snapshot(first, refs, ledger.omitted)
        marked: AIMessage = message.model_copy(update={"additional_kwargs": kwargs})
        return replace_last_ai_message(response, marked)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        request, ledger = self._with_ledger(request)
        return self._mark_response(handler(request), ledger)  # type: ignore[no-any-return]

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        request, ledger = self._with_ledger(request)
        return self._mark_response(await handler(request), ledger)  # type: ignore[no-any-return]
