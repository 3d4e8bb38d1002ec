"""Pair tool calls with their results, and rewrite tool-call arguments model-side.

Every model-bound argument rewrite (blocked-payload elision, superseded-write
elision) goes through here, so each surface a provider adapter may resend is
rewritten consistently: structured ``tool_calls``, the raw provider payload in
``additional_kwargs["tool_calls"]``, ``tool_use``/``tool_call``/``function_call``
content blocks and streamed ``tool_call_chunks``. Inputs are never mutated;
untouched messages pass through by identity.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage

__all__ = ["ToolCallOccurrence", "pair_tool_call_results", "rewrite_messages_tool_call_args"]


@dataclass(frozen=True)
class ToolCallOccurrence:
    """One tool call as it occurs in one AI message, and the result that answered it."""

    message: AIMessage
    message_index: int
    call: dict[str, Any]
    result: ToolMessage | None

    @property
    def call_id(self) -> str | None:
        value = self.call.get("id")
        return value if isinstance(value, str) else None


def pair_tool_call_results(messages: Sequence[Any]) -> list[ToolCallOccurrence]:
    """Each tool call of each AI message with the ``ToolMessage`` answering it.

    Pairing is per occurrence: a call is answered by a result with its id among
    the messages after its AI message and before the next AI message. Call ids
    can repeat across turns, so a history-wide id lookup would mislabel them.
    """
    occurrences: list[ToolCallOccurrence] = []
    index = 0
    total = len(messages)
    while index < total:
        message = messages[index]
        if not isinstance(message, AIMessage) or not message.tool_calls:
            index += 1
            continue
        results: dict[str, ToolMessage] = {}
        follower = index + 1
        while follower < total and not isinstance(messages[follower], AIMessage):
            candidate = messages[follower]
            if isinstance(candidate, ToolMessage) and candidate.tool_call_id not in results:
                results[candidate.tool_call_id] = candidate
            follower += 1
        for call in message.tool_calls:
            call_id = call.get("id")
            result = results.get(call_id) if isinstance(call_id, str) else None
            occurrences.append(
                ToolCallOccurrence(
                    message=message, message_index=index, call=dict(call), result=result
                )
            )
        index = follower
    return occurrences


Replacement = Callable[[AIMessage, dict[str, Any]], dict[str, Any] | None]


def _rewrite_raw_calls(raw: Any, replacements: dict[str, dict[str, Any]]) -> Any:
    if not isinstance(raw, list):
        return raw
    out: list[Any] = []
    for entry in raw:
        call_id = entry.get("id") if isinstance(entry, dict) else None
        function = entry.get("function") if isinstance(entry, dict) else None
        if isinstance(call_id, str) and call_id in replacements and isinstance(function, dict):
            entry = {
                **entry,
                "function": {**function, "arguments": json.dumps(replacements[call_id])},
            }
        out.append(entry)
    return out


def _rewrite_blocks(content: Any, replacements: dict[str, dict[str, Any]]) -> Any:
    if not isinstance(content, list):
        return content
    out: list[Any] = []
    for block in content:
        if isinstance(block, dict):
            kind = block.get("type")
            call_id = block.get("id") if kind != "function_call" else block.get("call_id")
            if isinstance(call_id, str) and call_id in replacements:
                args = replacements[call_id]
                if kind == "tool_use":
                    block = {**block, "input": args}
                elif kind == "tool_call":
                    block = {**block, "args": args}
                elif kind == "function_call":
                    block = {**block, "arguments": json.dumps(args)}
        out.append(block)
    return out


def _rewrite_message(message: AIMessage, replacements: dict[str, dict[str, Any]]) -> AIMessage:
    update: dict[str, Any] = {
        "tool_calls": [
            {**call, "args": replacements[call["id"]]}
            if isinstance(call.get("id"), str) and call["id"] in replacements
            else dict(call)
            for call in message.tool_calls
        ],
        "content": _rewrite_blocks(message.content, replacements),
    }
    raw = (message.additional_kwargs or {}).get("tool_calls")
    if raw is not None:
        update["additional_kwargs"] = {
            **message.additional_kwargs,
            "tool_calls": _rewrite_raw_calls(raw, replacements),
        }
    if isinstance(message, AIMessageChunk) and message.tool_call_chunks:
        update["tool_call_chunks"] = [
            {**chunk, "args": json.dumps(replacements[chunk["id"]])}
            if isinstance(chunk.get("id"), str) and chunk["id"] in replacements
            else dict(chunk)
            for chunk in message.tool_call_chunks
        ]
    return message.model_copy(update=update)


def rewrite_messages_tool_call_args(
    messages: Sequence[Any], replacement_for: Replacement
) -> list[Any] | None:
    """Messages with some tool calls' arguments replaced, or ``None`` if none changed.

    ``replacement_for(ai_message, tool_call)`` returns the new arguments or
    ``None`` to keep the call as it is.
    """
    changed = False
    out: list[Any] = []
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls:
            replacements: dict[str, dict[str, Any]] = {}
            for call in message.tool_calls:
                call_id = call.get("id")
                if not isinstance(call_id, str):
                    continue
                new_args = replacement_for(message, dict(call))
                if new_args is not None:
                    replacements[call_id] = new_args
            if replacements:
                out.append(_rewrite_message(message, replacements))
                changed = True
                continue
        out.append(message)
    return out if changed else None
