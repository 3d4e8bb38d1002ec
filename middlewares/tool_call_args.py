"""Reading and rewriting tool calls on AI messages, in every field adapters use.

A tool call lives in up to four places on one ``AIMessage``: ``tool_calls``,
``invalid_tool_calls``, the raw provider payload in
``additional_kwargs["tool_calls"]`` and tool-use content blocks. Provider
adapters resend whichever they find, so removing or rewriting a call in one
field only leaves a stale copy that strict providers reject (spec 000,
"Removing tool calls"). Every model-bound argument rewrite and every tool-call
removal goes through this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage

from middlewares.model_response import TOOL_CALL_BLOCK_TYPES, block_type_is

__all__ = [
    "DeclaredToolCall",
    "ToolCallPair",
    "clone_ai_message_with_tool_calls",
    "declared_tool_calls",
    "message_tool_call_ids",
    "pair_tool_call_results",
    "rewrite_tool_call_args",
]


@dataclass(frozen=True)
class DeclaredToolCall:
    """One tool call an AI message declares, whichever field it came from.

    ``args`` is the parsed argument object when there is one; ``raw_args`` keeps
    an unparsable argument string; ``source`` names the field.
    """

    id: str | None
    name: Any
    args: Any
    raw_args: str | None
    source: str


def _block_call_id(block: Any) -> Any:
    if not isinstance(block, dict):
        return None
    return block.get("id") if block.get("id") is not None else block.get("call_id")


def _raw_entries(message: AIMessage) -> list[Any]:
    raw = message.additional_kwargs.get("tool_calls") if message.additional_kwargs else None
    if isinstance(raw, list):
        return raw
    if isinstance(raw, dict):
        return [raw]
    return []


def _id_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def declared_tool_calls(message: AIMessage) -> list[DeclaredToolCall]:
    """Every tool call the message claims, first occurrence per id, in field order.

    Sources, in order: ``tool_calls``, ``additional_kwargs["tool_calls"]``,
    ``invalid_tool_calls``, then tool-use content blocks. Calls without a usable
    id are kept (``id=None``) so callers can repair them.
    """
    found: list[DeclaredToolCall] = []
    seen: set[str] = set()

    def add(call: DeclaredToolCall) -> None:
        if call.id is not None:
            if call.id in seen:
                return
            seen.add(call.id)
        found.append(call)

    for call in message.tool_calls or []:
        add(
            DeclaredToolCall(
                _id_text(call.get("id")), call.get("name"), call.get("args"), None, "tool_calls"
            )
        )
    for entry in _raw_entries(message):
        if not isinstance(entry, Mapping):
            continue
        function = entry.get("function")
        function = function if isinstance(function, Mapping) else {}
        raw_args = function.get("arguments")
        args, raw_text = _parse_args(raw_args)
        add(
            DeclaredToolCall(
                _id_text(entry.get("id")),
                function.get("name", entry.get("name")),
                args,
                raw_text,
                "additional_kwargs",
            )
        )
    for invalid in message.invalid_tool_calls or []:
        args, raw_text = _parse_args(invalid.get("args"))
        add(
            DeclaredToolCall(
                _id_text(invalid.get("id")),
                invalid.get("name"),
                args,
                raw_text,
                "invalid_tool_calls",
            )
        )
    if isinstance(message.content, list):
        for block in message.content:
            if block_type_is(block, TOOL_CALL_BLOCK_TYPES):
                call_id = _id_text(_block_call_id(block))
                if call_id is None:
                    continue
                add(
                    DeclaredToolCall(
                        call_id, block.get("name"), block.get("input"), None, "content"
                    )
                )
    return found


def _parse_args(raw: Any) -> tuple[Any, str | None]:
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return None, raw
        if isinstance(parsed, dict):
            return parsed, None
        return None, raw
    return None, None


def message_tool_call_ids(message: AIMessage) -> list[str]:
    """Ids of every tool call the message declares (all sources), in order."""
    return [call.id for call in declared_tool_calls(message) if call.id is not None]


def clone_ai_message_with_tool_calls(
    message: AIMessage, tool_calls: Sequence[ToolCall | Mapping[str, Any]]
) -> AIMessage:
    """A copy of ``message`` whose only tool calls are ``tool_calls``.

    Calls not kept are removed from every field: ``tool_calls``,
    ``invalid_tool_calls``, the raw ``additional_kwargs["tool_calls"]`` payload
    (and a legacy ``function_call``) and tool-use content blocks. Text and
    other blocks are kept; the original message is not modified.
    """
    kept = [dict(call) for call in tool_calls]
    kept_ids = {_id_text(call.get("id")) for call in kept} - {None}
    update: dict[str, Any] = {
        "tool_calls": kept,
        "invalid_tool_calls": [
            call
            for call in message.invalid_tool_calls or []
            if _id_text(call.get("id")) in kept_ids
        ],
    }
    kwargs = dict(message.additional_kwargs or {})
    if "tool_calls" in kwargs:
        raw_kept = [
            entry
            for entry in _raw_entries(message)
            if isinstance(entry, Mapping) and _id_text(entry.get("id")) in kept_ids
        ]
        if raw_kept:
            kwargs["tool_calls"] = raw_kept
        else:
            kwargs.pop("tool_calls")
    if not kept_ids:
        kwargs.pop("function_call", None)
    update["additional_kwargs"] = kwargs
    if isinstance(message.content, list):
        update["content"] = [
            block
            for block in message.content
            if not (
                block_type_is(block, TOOL_CALL_BLOCK_TYPES)
                and _id_text(_block_call_id(block)) not in kept_ids
            )
        ]
    return message.model_copy(update=update)


def rewrite_tool_call_args(
    message: AIMessage, tool_call_id: str, args: Mapping[str, Any]
) -> AIMessage:
    """A copy of ``message`` where call ``tool_call_id`` carries ``args`` everywhere."""
    new_args = dict(args)
    tool_calls = [
        {**call, "args": new_args} if call.get("id") == tool_call_id else call
        for call in message.tool_calls or []
    ]
    kwargs = dict(message.additional_kwargs or {})
    raw = kwargs.get("tool_calls")
    if isinstance(raw, list):
        rewritten: list[Any] = []
        for entry in raw:
            if (
                isinstance(entry, Mapping)
                and _id_text(entry.get("id")) == tool_call_id
                and isinstance(entry.get("function"), Mapping)
            ):
                function = {**entry["function"], "arguments": json.dumps(new_args)}
                entry = {**entry, "function": function}
            rewritten.append(entry)
        kwargs["tool_calls"] = rewritten
    update: dict[str, Any] = {"tool_calls": tool_calls, "additional_kwargs": kwargs}
    if isinstance(message.content, list):
        update["content"] = [
            {**block, "input": new_args}
            if block_type_is(block, TOOL_CALL_BLOCK_TYPES)
            and _id_text(_block_call_id(block)) == tool_call_id
            and "input" in block
            else block
            for block in message.content
        ]
    return message.model_copy(update=update)


@dataclass(frozen=True)
class ToolCallPair:
    """A declared tool call and the first ``ToolMessage`` answering it (if any)."""

    ai_index: int
    call: DeclaredToolCall
    result_index: int | None
    result: ToolMessage | None


def pair_tool_call_results(messages: Sequence[BaseMessage]) -> list[ToolCallPair]:
    """Pair each declared tool call with its result by ``tool_call_id``.

    Results are matched in order, each used once, and only after the declaring
    AI message, so a reused id pairs with the right result.
    """
    results: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage) and isinstance(message.tool_call_id, str):
            results.setdefault(message.tool_call_id, []).append(index)
    pairs: list[ToolCallPair] = []
    for index, message in enumerate(messages):
        if not isinstance(message, AIMessage):
            continue
        for call in declared_tool_calls(message):
            match: int | None = None
            if call.id is not None:
                queue = results.get(call.id, [])
                while queue and queue[0] < index:
                    queue.pop(0)
                if queue:
                    match = queue.pop(0)
            result = messages[match] if match is not None else None
            pairs.append(
                ToolCallPair(
                    index,
                    call,
                    match,
                    result if isinstance(result, ToolMessage) else None,
                )
            )
    return pairs
