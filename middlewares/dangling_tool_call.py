"""DanglingToolCallMiddleware (spec 000, number 8): a request strict providers accept.

Strict providers reject a history where an AI tool call has no matching
``ToolMessage`` right after it (the user interrupted a run, a tool result was
lost, a provider emitted an unparsable call), where a ``ToolMessage`` answers
nothing, or where a tool call carries a malformed name or non-JSON arguments.

The repair is "index first, rebuild second" and only touches the model-bound
request (state is never rewritten, so no provenance stamp is needed):

1. Index every ``ToolMessage`` by its ``tool_call_id`` (a FIFO per id).
2. Rebuild the list: after each AI message come the results of its tool calls
   in the order the calls were declared, taken from the index wherever they sat
   in the history; a call with no result gets a placeholder error
   ``ToolMessage``. Calls are collected from all three sources adapters use:
   ``tool_calls``, ``additional_kwargs["tool_calls"]`` and
   ``invalid_tool_calls`` (and tool-use content blocks), so whichever field a
   provider put a call in, it is answered. Results that answer nothing are left
   out of the request.
3. Malformed tool-call names and arguments are sanitised on the request copy;
   the raw provider payload in ``additional_kwargs["tool_calls"]`` keeps its
   extra fields, with name and arguments made consistent.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage

from middlewares._identity_cache import IdentityCache
from middlewares._prefix_fold import PrefixFold
from middlewares.model_response import TOOL_CALL_BLOCK_TYPES, block_type_is
from middlewares.tool_call_args import DeclaredToolCall, declared_tool_calls

__all__ = [
    "DANGLING_PLACEHOLDER_KEY",
    "PLACEHOLDER_TEXT",
    "DanglingToolCallMiddleware",
    "repair_tool_call_protocol",
    "sanitize_tool_name",
]

logger = logging.getLogger(__name__)

DANGLING_PLACEHOLDER_KEY = "deerflow_dangling_placeholder"
PLACEHOLDER_TEXT = (
    "[No result: this tool call was not executed or its result was lost (for example, "
    "the run was interrupted or the call was malformed). Do not assume it succeeded.]"
)
_VALID_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_RAW_ARGS_LIMIT = 2000


def sanitize_tool_name(name: Any) -> str:
    """A name every provider accepts (``[A-Za-z0-9_-]{1,64}``)."""
    if isinstance(name, str) and _VALID_NAME.match(name):
        return name
    text = name if isinstance(name, str) else ""
    cleaned = _INVALID_NAME_CHARS.sub("_", text.strip())[:64].strip("_")
    return cleaned or "invalid_tool_call"


def _sanitize_args(call: DeclaredToolCall) -> dict[str, Any]:
    if isinstance(call.args, dict):
        try:
            json.dumps(call.args)
        except (TypeError, ValueError):
            return {"_unserializable_arguments": repr(call.args)[:_RAW_ARGS_LIMIT]}
        return call.args
    if call.raw_args is not None:
        return {"_invalid_arguments": call.raw_args[:_RAW_ARGS_LIMIT]}
    if call.args is not None:
        return {"_invalid_arguments": repr(call.args)[:_RAW_ARGS_LIMIT]}
    return {}


def _is_clean(message: AIMessage, calls: list[DeclaredToolCall]) -> bool:
    """Well-formed already: only ``tool_calls``, valid names and JSON-object args."""
    if message.invalid_tool_calls or "tool_calls" in (message.additional_kwargs or {}):
        return False
    return all(
        call.source == "tool_calls"
        and call.id is not None
        and isinstance(call.name, str)
        and _VALID_NAME.match(call.name) is not None
        and _sanitize_args(call) is call.args
        for call in calls
    )


def _repaired_ai_message(
    message: AIMessage, calls: list[DeclaredToolCall], ids: list[str]
) -> AIMessage:
    sanitized = [
        {
            "name": sanitize_tool_name(call.name),
            "args": _sanitize_args(call),
            "id": call_id,
            "type": "tool_call",
        }
        for call, call_id in zip(calls, ids, strict=True)
    ]
    by_id = {entry["id"]: entry for entry in sanitized}
    kwargs = dict(message.additional_kwargs or {})
    raw = kwargs.get("tool_calls")
    if raw is not None:
        raw_by_id: dict[str, Mapping[str, Any]] = {}
        for entry in raw if isinstance(raw, list) else [raw]:
            if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
                raw_by_id.setdefault(entry["id"], entry)
        rebuilt = []
        for entry in sanitized:
            base: dict[str, Any] = dict(raw_by_id.get(str(entry["id"])) or {"type": "function"})
            function = base.get("function")
            function = dict(function) if isinstance(function, Mapping) else {}
            function["name"] = entry["name"]
            function["arguments"] = json.dumps(entry["args"])
            base.update({"id": entry["id"], "function": function})
            rebuilt.append(base)
        kwargs["tool_calls"] = rebuilt
    update: dict[str, Any] = {
        "tool_calls": sanitized,
        "invalid_tool_calls": [],
        "additional_kwargs": kwargs,
    }
    if isinstance(message.content, list):
        blocks: list[Any] = []
        for block in message.content:
            if block_type_is(block, TOOL_CALL_BLOCK_TYPES):
                call_id = block.get("id") if block.get("id") is not None else block.get("call_id")
                entry = by_id.get(call_id) if isinstance(call_id, str) else None
                if entry is None:
                    continue
                block = {**block, "name": entry["name"]}
                if "input" in block:
                    block["input"] = entry["args"]
            blocks.append(block)
        update["content"] = blocks
    return message.model_copy(update=update)


# Per AI message object: its declared tool calls and whether they are already clean.
_verdicts: IdentityCache[tuple[list[DeclaredToolCall], bool]] = IdentityCache()


def _verdict(message: AIMessage) -> tuple[list[DeclaredToolCall], bool]:
    verdict = _verdicts.get(message)
    if IdentityCache.missing(verdict):
        found = declared_tool_calls(message)
        verdict = _verdicts.put(message, (found, bool(found) and _is_clean(message, found)))
    return verdict  # type: ignore[no-any-return]


# Fold state: (ids the next tool results must answer, in order; how many did; sound so far).
_SoundState = tuple[tuple[str | None, ...], int, bool]
_EMPTY: _SoundState = ((), 0, True)
_UNSOUND: _SoundState = ((), 0, False)


def _sound_step(state: _SoundState, message: Any) -> _SoundState:
    expected, position, sound = state
    if not sound:
        return state
    if isinstance(message, ToolMessage):
        if position >= len(expected) or message.tool_call_id != expected[position]:
            return _UNSOUND  # an orphan, a duplicate or an out-of-order result
        return (expected, position + 1, True)
    if position != len(expected):
        return _UNSOUND  # an unanswered call
    if not isinstance(message, AIMessage):
        return _EMPTY
    calls, clean = _verdict(message)
    ids = tuple(call.id for call in calls)
    if (calls and not clean) or None in ids:
        return _UNSOUND
    return (ids, 0, True)


_soundness: PrefixFold[_SoundState] = PrefixFold(_EMPTY, _sound_step)


def _already_sound(messages: Sequence[AnyMessage]) -> bool:
    """True when repairing would change nothing (the common case), without the full repair.

    Sound means: every AI message's calls are clean and answered by the tool
    results that immediately follow it, in call order, and no other tool result
    exists. Anything else takes the full repair. The check is a fold resumed
    from the previous history (``PrefixFold``): a step costs the new messages.
    """
    expected, position, sound = _soundness(messages)
    return sound and position == len(expected)


def repair_tool_call_protocol(messages: list[AnyMessage]) -> tuple[list[AnyMessage], bool]:
    """The repaired message list, and whether anything changed."""
    if _already_sound(messages):
        return messages, False
    return _repair(messages)


def _repair(messages: list[AnyMessage]) -> tuple[list[AnyMessage], bool]:
    results: dict[str, deque[ToolMessage]] = {}
    for message in messages:
        if isinstance(message, ToolMessage) and isinstance(message.tool_call_id, str):
            results.setdefault(message.tool_call_id, deque()).append(message)

    rebuilt: list[AnyMessage] = []
    used: set[int] = set()
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            continue
        if not isinstance(message, AIMessage):
            rebuilt.append(message)
            continue
        calls, clean = _verdict(message)
        if not calls:
            rebuilt.append(message)
            continue
        ids = [
            call.id if call.id is not None else f"call_repaired_{index}_{position}"
            for position, call in enumerate(calls)
        ]
        rebuilt.append(message if clean else _repaired_ai_message(message, calls, ids))
        for call, call_id in zip(calls, ids, strict=True):
            queue = results.get(call_id)
            if queue:
                result = queue.popleft()
                used.add(id(result))
                rebuilt.append(result)
                continue
            rebuilt.append(
                ToolMessage(
                    content=PLACEHOLDER_TEXT,
                    tool_call_id=call_id,
                    name=sanitize_tool_name(call.name),
                    status="error",
                    additional_kwargs={DANGLING_PLACEHOLDER_KEY: True},
                )
            )
    orphans = [m.tool_call_id for m in messages if isinstance(m, ToolMessage) and id(m) not in used]
    if orphans:
        logger.info(
            "dangling tool calls: leaving %d unmatched tool results out: %s", len(orphans), orphans
        )
    changed = len(rebuilt) != len(messages) or any(
        a is not b for a, b in zip(rebuilt, messages, strict=True)
    )
    return rebuilt, changed


class DanglingToolCallMiddleware(AgentMiddleware[Any, Any]):
    """Answer every tool call and sanitise malformed calls in the model request."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def _repair(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        messages, changed = repair_tool_call_protocol(list(request.messages))
        return request.override(messages=messages) if changed else request

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._repair(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._repair(request))
