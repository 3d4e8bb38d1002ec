"""Apply a rewrite to the ``ToolMessage``s a tool call produced.

A tool returns either a ``ToolMessage`` or a ``Command`` whose
``update["messages"]`` carries the ``ToolMessage`` (and possibly others).
Middlewares that stamp or rewrite results must reach both shapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from langchain_core.messages import ToolMessage
from langgraph.types import Command

__all__ = [
    "OFF_LOOP_CHARS",
    "apply_sized",
    "map_tool_messages",
    "result_text_size",
    "tool_message_text",
    "with_text",
]

# Text larger than this is scanned or hashed in a worker thread, not on the loop.
OFF_LOOP_CHARS = 256 * 1024

T = TypeVar("T")


async def apply_sized(result: Any, apply: Callable[..., T], *args: Any) -> T:
    """``apply(*args)`` on the loop for small results, in a worker thread for big ones.

    ``result`` is the tool result whose text size decides: scanning or hashing
    megabytes would stall the event loop every other run shares.
    """
    if result_text_size(result) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(apply, *args)
    return apply(*args)


def map_tool_messages(
    result: Any,
    fn: Callable[[ToolMessage], ToolMessage],
    *,
    tool_call_id: str | None = None,
) -> Any:
    """``result`` with ``fn`` applied to its tool messages.

    With ``tool_call_id`` only messages answering that call are rewritten.
    Anything that is neither a ``ToolMessage`` nor a ``Command`` is returned as is.
    """

    def wanted(message: Any) -> bool:
        return isinstance(message, ToolMessage) and (
            tool_call_id is None or message.tool_call_id == tool_call_id
        )

    if isinstance(result, ToolMessage):
        return fn(result) if wanted(result) else result
    if isinstance(result, Command) and isinstance(result.update, dict):
        messages = result.update.get("messages")
        if isinstance(messages, list) and any(wanted(m) for m in messages):
            update = dict(result.update)
            update["messages"] = [fn(m) if wanted(m) else m for m in messages]
            return Command(
                graph=result.graph,
                update=update,
                resume=result.resume,
                goto=result.goto,
            )
    return result


def tool_message_text(message: ToolMessage) -> str:
    """The text a model reads from a tool message (string or text blocks)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


def with_text(message: ToolMessage, rewrite: Callable[[str], str]) -> ToolMessage:
    """A copy with ``rewrite`` applied to every text part; media blocks untouched."""
    content = message.content
    if isinstance(content, str):
        new: Any = rewrite(content)
    else:
        new = []
        for block in content:
            if isinstance(block, str):
                new.append(rewrite(block))
            elif (
                isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
            ):
                new.append({**block, "text": rewrite(block["text"])})
            else:
                new.append(block)
    return message.model_copy(update={"content": new})


def result_text_size(result: Any) -> int:
    """Characters of text in a tool result (``ToolMessage`` or ``Command``)."""
    messages: list[Any] = []
    if isinstance(result, ToolMessage):
        messages = [result]
    elif isinstance(result, Command) and isinstance(result.update, dict):
        found = result.update.get("messages")
        messages = found if isinstance(found, list) else []
    return sum(len(tool_message_text(m)) for m in messages if isinstance(m, ToolMessage))
