"""SystemMessageCoalescingMiddleware (spec 000, number 30): one leading system message.

Strict backends (vLLM, SGLang, Qwen templates, Anthropic) reject a system
message that is not first, or more than one. Middlewares legitimately add
``SystemMessage``s mid-history (context rules, date reminders), so this merges
the request's system prompt and every ``SystemMessage`` in the messages, in
order, into a single leading system message. Only the model-bound request
changes; checkpoint state keeps the messages where they were. When several
``dynamic_context_reminder`` system messages exist (a run crossed midnight),
only the latest survives.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage

from deerflow_extension_api.provenance import ContentKind, ProducerKind

__all__ = ["SystemMessageCoalescingMiddleware", "coalesce_system_messages"]

REMINDER_KEY = "dynamic_context_reminder"
PROVENANCE = {
    "deerflow_content_kind": ContentKind.COALESCED_SYSTEM.value,
    "deerflow_producer_kind": ProducerKind.SYSTEM_MESSAGE_COALESCING.value,
}


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if isinstance(content, list):
        return [
            {"type": "text", "text": block} if isinstance(block, str) else block
            for block in content
            if not (isinstance(block, str) and not block.strip())
        ]
    return []


def coalesce_system_messages(
    system_message: SystemMessage | None, messages: list[Any]
) -> tuple[SystemMessage | None, list[Any]] | None:
    """(merged system message, remaining messages), or None when nothing to merge."""
    systems = [m for m in messages if isinstance(m, SystemMessage)]
    if not systems:
        return None
    reminders = [m for m in systems if (m.additional_kwargs or {}).get(REMINDER_KEY)]
    stale = {id(m) for m in reminders[:-1]}
    parts = ([system_message] if system_message is not None else []) + [
        m for m in systems if id(m) not in stale
    ]
    blocks: list[Any] = []
    for part in parts:
        blocks.extend(_blocks(part.content))
    content: str | list[Any]
    if all(isinstance(b, dict) and b.get("type") == "text" and len(b) == 2 for b in blocks):
        content = "\n\n".join(str(b["text"]) for b in blocks)
    else:
        content = blocks
    kwargs = dict(system_message.additional_kwargs) if system_message is not None else {}
    kwargs.update(PROVENANCE)
    merged = SystemMessage(content=content, additional_kwargs=kwargs)
    return merged, [m for m in messages if not isinstance(m, SystemMessage)]


class SystemMessageCoalescingMiddleware(AgentMiddleware[Any, Any]):
    """Merge every system message into one leading system message per request."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def _coalesce(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        merged = coalesce_system_messages(request.system_message, list(request.messages))
        if merged is None:
            return request
        system, messages = merged
        return request.override(system_message=system, messages=messages)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._coalesce(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._coalesce(request))
