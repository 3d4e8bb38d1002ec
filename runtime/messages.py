"""Message helpers every layer shares: the text of message content, whatever its
shape, and the ``additional_kwargs`` keys our middlewares mark messages with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LLM_ERROR_KEY", "RUN_OUTCOME_KEY", "content_text"]

LLM_ERROR_KEY = "deerflow_llm_error"
"""Marks the fallback answer of a model call that failed (LLMErrorHandlingMiddleware)."""

RUN_OUTCOME_KEY = "deerflow_run_outcome"
"""Marks how a run ended on its last message (TerminalResponseMiddleware)."""


def content_text(content: Any, separator: str = "") -> str:
    """String content as is; for block lists, the string and ``text`` blocks joined.

    Anything else (None, numbers, blocks without text) contributes nothing, so
    a malformed persisted message never raises here.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return separator.join(parts)
