"""TitleMiddleware (spec 000, number 24): name the thread after its first full exchange.

After the first complete exchange (a user message answered by a final AI
message without tool calls) and while the thread has no title, it writes
``title`` into state. With ``title.model`` set, that model writes the title
from the normalized text of the exchange; its call is tagged ``nostream`` so
its tokens never reach the client's message stream, and its metadata carries
``SystemOperationKind.TITLE``. Without a model, or when the model fails, the
title is the first user message, collapsed and cut at a word boundary: a run
never fails because of its title.

The user's text is the message's ``original_user_content`` when the server
recorded one (Uploads puts an ``<uploaded_files>`` block in front of the text,
which must not become the title). With PII redaction on, the title input goes
through ``redact_text`` (spec 4), so neither the title model nor the stored
title sees the raw values.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import TAG_NOSTREAM
from langgraph.runtime import Runtime

from middlewares._text import content_text
from middlewares.pii_redaction import PiiRedactor, redact_text

__all__ = ["TITLE_PROMPT", "TitleMiddleware", "fallback_title", "message_text", "user_text"]

logger = logging.getLogger(__name__)

TITLE_PROMPT = (
    "Write a short title (at most {max_words} words) for this conversation. "
    "Reply with the title only, no quotes and no trailing punctuation."
)
_SPACE = re.compile(r"\s+")


def message_text(message: BaseMessage) -> str:
    """Plain text of a message, whatever its content shape (blocks, lists, None)."""
    return content_text(message.content, " ")


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip().strip("\"'`").strip()


def fallback_title(text: str, max_chars: int) -> str:
    """The first line of ``text``, collapsed and cut at a word boundary."""
    first = _clean(text.strip().splitlines()[0] if text.strip() else "")
    if not first:
        return "New conversation"
    if len(first) <= max_chars:
        return first
    cut = first[: max_chars - 1].rsplit(" ", 1)[0] or first[: max_chars - 1]
    return cut.rstrip(" ,.;:") + "…"


def user_text(message: BaseMessage) -> str:
    """What the user typed: ``original_user_content`` when valid, else the message text."""
    original = (message.additional_kwargs or {}).get("original_user_content")
    return original if isinstance(original, str) else message_text(message)


def _is_user_message(message: BaseMessage) -> bool:
    kwargs = message.additional_kwargs or {}
    return isinstance(message, HumanMessage) and not kwargs.get("hide_from_ui")


class TitleMiddleware(AgentMiddleware[Any, Any]):
    """Write ``state["title"]`` once, after the first complete exchange."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        model: BaseChatModel | None = None,
        max_chars: int = 60,
        max_words: int = 8,
        redactor: PiiRedactor | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.redactor = redactor
        self.max_chars = max(8, max_chars)
        self.max_words = max(1, max_words)

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "model": bool(self.model),
            "max_chars": self.max_chars,
            "max_words": self.max_words,
            "redacted": self.redactor is not None,
        }

    def _exchange(self, state: Any) -> tuple[str, str] | None:
        if not isinstance(state, dict) or state.get("title"):
            return None
        messages = state.get("messages") or []
        if not messages or not isinstance(messages[-1], AIMessage) or messages[-1].tool_calls:
            return None
        question = next((user_text(m) for m in messages if _is_user_message(m)), "")
        if not question.strip():
            return None
        answer = message_text(messages[-1])
        if self.redactor is not None:
            question = redact_text(question, redactor=self.redactor)
            answer = redact_text(answer, redactor=self.redactor)
        return question, answer

    def _prompt(self, question: str, answer: str) -> list[BaseMessage]:
        return [
            SystemMessage(TITLE_PROMPT.format(max_words=self.max_words)),
            HumanMessage(f"User: {question[:2000]}\n\nAssistant: {answer[:2000]}"),
        ]

    def _config(self) -> RunnableConfig:
        return {
            "tags": [TAG_NOSTREAM, "deerflow:title"],
            "metadata": {"deerflow_system_operation": "title"},
        }

    def _finish(self, raw: Any, question: str) -> dict[str, Any]:
        text = _clean(message_text(raw)) if isinstance(raw, BaseMessage) else ""
        title = (
            fallback_title(text, self.max_chars)
            if text
            else fallback_title(question, self.max_chars)
        )
        return {"title": title}

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        exchange = self._exchange(state)
        if exchange is None:
            return None
        question, answer = exchange
        raw = None
        if self.model is not None:
            try:
                raw = self.model.invoke(self._prompt(question, answer), self._config())
            except Exception as exc:
                logger.warning("title model failed, using the fallback title: %s", exc)
        return self._finish(raw, question)

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        exchange = self._exchange(state)
        if exchange is None:
            return None
        question, answer = exchange
        raw = None
        if self.model is not None:
            try:
                raw = await self.model.ainvoke(self._prompt(question, answer), self._config())
            except Exception as exc:
                logger.warning("title model failed, using the fallback title: %s", exc)
        return self._finish(raw, question)
