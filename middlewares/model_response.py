"""Shared classification of model responses (spec 000, "model_response.py").

Used by the LLM-error-handling, terminal-response, model-length and safety
middlewares so they agree on what "empty", "wants tools" and "finish reason"
mean. Provider payloads are untrusted JSON: every helper here tolerates odd
shapes (content blocks whose ``type`` is a list or an object, non-string
metadata) and never raises on them. Block types are compared by equality,
never by set membership, because hashing ``type: []`` would raise TypeError.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeGuard

from langchain.agents.middleware.types import ExtendedModelResponse, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage

__all__ = [
    "TEXT_BLOCK_TYPES",
    "TOOL_CALL_BLOCK_TYPES",
    "append_visible_text",
    "block_type_is",
    "finish_reason",
    "has_tool_call_intent",
    "has_visible_content",
    "last_ai_message",
    "replace_last_ai_message",
]

# Tuples, not sets: membership in a tuple uses equality, so an unhashable
# ``type`` value is compared (and found unequal) instead of raising.
TEXT_BLOCK_TYPES: tuple[str, ...] = ("text", "output_text")
TOOL_CALL_BLOCK_TYPES: tuple[str, ...] = (
    "tool_use",
    "tool_call",
    "function_call",
    "server_tool_use",
)


def block_type_is(block: Any, types: Iterable[str]) -> TypeGuard[dict[str, Any]]:
    """Whether a content block's ``type`` equals one of ``types`` (never hashes it)."""
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if not isinstance(kind, str):
        return False
    return any(kind == wanted for wanted in types)


def _messages_of(value: Any) -> Sequence[BaseMessage]:
    if isinstance(value, ExtendedModelResponse):
        return value.model_response.result
    if isinstance(value, ModelResponse):
        return value.result
    if isinstance(value, BaseMessage):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [m for m in value if isinstance(m, BaseMessage)]
    return []


def last_ai_message(value: Any) -> AIMessage | None:
    """The last ``AIMessage`` of a response, message list or message (else None)."""
    for message in reversed(list(_messages_of(value))):
        if isinstance(message, AIMessage):
            return message
    return None


def replace_last_ai_message(response: Any, replacement: AIMessage) -> Any:
    """``response`` with its last AI message swapped (same container type)."""
    if isinstance(response, AIMessage):
        return replacement
    if isinstance(response, ExtendedModelResponse):
        return ExtendedModelResponse(
            model_response=replace_last_ai_message(response.model_response, replacement),
            command=response.command,
        )
    if isinstance(response, ModelResponse):
        result = list(response.result)
        for index in range(len(result) - 1, -1, -1):
            if isinstance(result[index], AIMessage):
                result[index] = replacement
                break
        else:
            result.append(replacement)
        return ModelResponse(result=result, structured_response=response.structured_response)
    return response


def has_tool_call_intent(message: AIMessage | None) -> bool:
    """Whether the message asks for any tool call, in any of the fields adapters use."""
    if message is None:
        return False
    if message.tool_calls or message.invalid_tool_calls:
        return True
    raw = message.additional_kwargs.get("tool_calls") if message.additional_kwargs else None
    if isinstance(raw, list) and raw:
        return True
    if isinstance(raw, dict) and raw:
        return True
    content = message.content
    if isinstance(content, list):
        return any(block_type_is(block, TOOL_CALL_BLOCK_TYPES) for block in content)
    return False


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if block_type_is(block, TEXT_BLOCK_TYPES):
        text = block.get("text")
        return text if isinstance(text, str) else ""
    return ""


def has_visible_content(message: AIMessage | None) -> bool:
    """Whether the message carries text a user would see (not only whitespace).

    Reasoning, tool-use and unknown blocks are not visible; a block whose
    ``type`` is not a string is skipped and the remaining blocks are read.
    """
    if message is None:
        return False
    content = message.content
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(_block_text(block).strip() for block in content)
    return False


def append_visible_text(message: AIMessage, text: str) -> AIMessage:
    """A copy of ``message`` with ``text`` appended as visible text.

    String content gets a blank-line separator; block content keeps every
    existing block (reasoning, tool-use, odd types) and gains a text block.
    """
    content = message.content
    new_content: str | list[Any]
    if isinstance(content, str):
        new_content = f"{content.rstrip()}\n\n{text}" if content.strip() else text
    elif isinstance(content, list):
        new_content = [*content, {"type": "text", "text": text}]
    else:
        new_content = text
    return message.model_copy(update={"content": new_content})


_REASON_KEYS = ("finish_reason", "stop_reason", "finishReason")


def finish_reason(message: AIMessage | None) -> str | None:
    """The provider's finish reason, lower-cased (``length``, ``content_filter``...).

    Reads ``response_metadata`` (OpenAI ``finish_reason``, Anthropic
    ``stop_reason``, Gemini ``finish_reason``) and falls back to
    ``additional_kwargs``. Non-string values are ignored.
    """
    if message is None:
        return None
    for source in (message.response_metadata, message.additional_kwargs):
        if not isinstance(source, dict):
            continue
        for key in _REASON_KEYS:
            value = source.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip().lower()
    return None
