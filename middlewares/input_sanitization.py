"""InputSanitizationMiddleware (spec 000, number 1): caller markers made inert.

A user can type ``<system-reminder>`` or ``<|im_start|>system`` into a message
and hope the model reads it as trusted framework context. This middleware is
the outermost model wrapper, so every inner middleware (including LLM retries)
sees the sanitised request: in every genuine user message of every turn,
reserved markers are neutralised (escaped, never stripped) and the text is
wrapped in an ``<untrusted_input>`` envelope flagged ``untrusted_input`` in
``additional_kwargs``. Only the model-bound request changes; state keeps what
the user sent, so no provenance stamp is needed.

Genuine user messages are ``HumanMessage``s without server provenance
(``deerflow_producer_kind``): server-injected context carries that stamp, and
the auth layer strips caller-supplied provenance before a run starts.

``additional_kwargs["original_user_content"]`` is server-owned: a valid string
is kept (first writer wins); any other value is replaced by the message's text
before wrapping, and a wrapped message without one gets its pre-wrap text.

A block the server itself wrote into a user message (Uploads' ``<uploaded_files>``
listing) carries its provenance in ``additional_kwargs["deerflow_server_block"]``
(content kind, producer kind and the exact text; the auth layer strips every
``deerflow_*`` key a caller sends, so it cannot be forged). When the message
still starts with exactly that text, the block is left intact and only the
user's own text after it is neutralised and wrapped: the first writer wins.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage, HumanMessage

from middlewares._prefix_fold import prefix_count
from middlewares._text import content_text
from runtime.untrusted_content import neutralize_untrusted_tags_counted

__all__ = [
    "ORIGINAL_USER_CONTENT_KEY",
    "SERVER_BLOCK_KEY",
    "UNTRUSTED_INPUT_KEY",
    "InputSanitizationMiddleware",
    "is_genuine_user_message",
    "sanitize_user_message",
    "server_block_kwargs",
]

ORIGINAL_USER_CONTENT_KEY = "original_user_content"
UNTRUSTED_INPUT_KEY = "untrusted_input"
SERVER_BLOCK_KEY = "deerflow_server_block"
PROVENANCE_KEYS = ("deerflow_producer_kind", "deerflow_content_kind")

_OPEN = '<untrusted_input source="user">'
_CLOSE = "</untrusted_input>"


def is_genuine_user_message(message: Any) -> bool:
    """A human message the caller wrote (no server provenance stamp)."""
    if not isinstance(message, HumanMessage):
        return False
    kwargs = message.additional_kwargs or {}
    return not any(isinstance(kwargs.get(key), str) and kwargs.get(key) for key in PROVENANCE_KEYS)


def _text_of(content: Any) -> str:
    return content_text(content)


def server_block_kwargs(text: str, *, content_kind: str, producer_kind: str) -> dict[str, Any]:
    """``additional_kwargs`` entry recording a server-written leading block of a user message."""
    return {
        SERVER_BLOCK_KEY: {
            "content_kind": content_kind,
            "producer_kind": producer_kind,
            "text": text,
        }
    }


def _server_block(message: HumanMessage) -> str | None:
    """The validated server-written prefix of ``message``, or None."""
    raw = (message.additional_kwargs or {}).get(SERVER_BLOCK_KEY)
    if not isinstance(raw, dict):
        return None
    text = raw.get("text")
    if not isinstance(text, str) or not text:
        return None
    if not all(isinstance(raw.get(k), str) for k in ("content_kind", "producer_kind")):
        return None
    content = message.content
    if isinstance(content, str):
        return text if content.startswith(text) else None
    if isinstance(content, list) and content:
        first = content[0]
        if isinstance(first, dict) and first.get("type") == "text" and first.get("text") == text:
            return text
    return None


def _neutralize_blocks(blocks: list[Any]) -> tuple[list[Any], int]:
    count = 0
    out: list[Any] = []
    for block in blocks:
        if isinstance(block, str):
            cleaned, found = neutralize_untrusted_tags_counted(block)
            count += found
            out.append(cleaned)
        elif (
            isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ):
            cleaned, found = neutralize_untrusted_tags_counted(block["text"])
            count += found
            out.append({**block, "text": cleaned} if found else block)
        else:
            out.append(block)
    return out, count


def sanitize_user_message(message: HumanMessage) -> HumanMessage:
    """The model-bound view of one genuine user message (the same object if clean)."""
    kwargs = dict(message.additional_kwargs or {})
    original = kwargs.get(ORIGINAL_USER_CONTENT_KEY)
    changed_kwargs = False
    if ORIGINAL_USER_CONTENT_KEY in kwargs and not isinstance(original, str):
        kwargs[ORIGINAL_USER_CONTENT_KEY] = _text_of(message.content)
        changed_kwargs = True

    content = message.content
    server = _server_block(message)
    count = 0
    new_content: Any = content
    if isinstance(content, str):
        head, rest = ("", content) if server is None else (server, content[len(server) :])
        cleaned, count = neutralize_untrusted_tags_counted(rest)
        if count:
            body = cleaned.lstrip("\n") if head else cleaned
            wrapped = f"{_OPEN}\n{body}\n{_CLOSE}"
            new_content = f"{head}\n\n{wrapped}" if head else wrapped
    elif isinstance(content, list):
        head_blocks = content[:1] if server is not None else []
        blocks, count = _neutralize_blocks(content[len(head_blocks) :])
        if count:
            new_content = [
                *head_blocks,
                {"type": "text", "text": _OPEN},
                *blocks,
                {"type": "text", "text": _CLOSE},
            ]
    if not count and not changed_kwargs:
        return message
    if count:
        if not isinstance(kwargs.get(ORIGINAL_USER_CONTENT_KEY), str):
            kwargs[ORIGINAL_USER_CONTENT_KEY] = _text_of(content)
        kwargs[UNTRUSTED_INPUT_KEY] = {"neutralized_markers": count}
    return message.model_copy(update={"content": new_content, "additional_kwargs": kwargs})


def _needs_sanitization(message: Any) -> bool:
    return is_genuine_user_message(message) and sanitize_user_message(message) is not message


_needing_sanitization = prefix_count(_needs_sanitization)


class InputSanitizationMiddleware(AgentMiddleware[Any, Any]):
    """Neutralise caller-typed framework markers in the model-bound request."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def _sanitize(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        if not _needing_sanitization(request.messages):
            return request  # the common case, decided per new message only
        messages: list[AnyMessage] = []
        changed = False
        for message in request.messages:
            if is_genuine_user_message(message):
                clean = sanitize_user_message(message)  # type: ignore[arg-type]
                changed = changed or clean is not message
                messages.append(clean)
            else:
                messages.append(message)
        return request.override(messages=messages) if changed else request

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._sanitize(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._sanitize(request))
