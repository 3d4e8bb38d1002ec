"""Neutralising framework and injection markers in untrusted text.

The server wraps trusted context in tags (``<system-reminder>``,
``<uploaded_files>``, ...) and models are trained on chat-template tokens
(``<|im_start|>``, ``[INST]``). Text from a caller or a fetched page that
contains those markers could forge trusted context. ``neutralize_untrusted_tags``
keeps the text readable but makes the markers inert by escaping their angle
brackets (``<system-reminder>`` becomes ``&lt;system-reminder&gt;``); nothing is
stripped. The same guard is used for user input, remote tool results and
model-visible resource metadata.
"""

from __future__ import annotations

import re

__all__ = [
    "RESERVED_TAG_NAMES",
    "neutralize_untrusted_tags",
    "neutralize_untrusted_tags_counted",
]

# Tags the server itself uses, plus tags commonly used to forge instructions.
RESERVED_TAG_NAMES: tuple[str, ...] = (
    "system-reminder",
    "system-prompt",
    "system-message",
    "system",
    "developer",
    "instructions",
    "untrusted-input",
    "untrusted-content",
    "uploaded-files",
    "slash-skill-activation",
    "skill-content",
    "skill",
    "user-request",
    "durable-context",
    "dynamic-context",
    "memory",
    "tool-receipts",
    "receipt-ledger",
    "tool-result",
    "tool-results",
    "function-results",
    "function-calls",
    "tool-call",
    "human-input",
    "assistant",
    "user",
    "human",
)


def _name_pattern(name: str) -> str:
    parts = re.split(r"[-_]", name)
    return r"[-_\s]?".join(re.escape(part) for part in parts)


_TAG = re.compile(
    r"<\s*/?\s*(?:"
    + "|".join(_name_pattern(n) for n in sorted(RESERVED_TAG_NAMES, key=len, reverse=True))
    + r")(?=[\s/>]|$)[^<>]{0,256}>?",
    re.IGNORECASE,
)
_TEMPLATE_TOKEN = re.compile(r"<\s*\|[^<>|\s]{1,64}\|\s*>|\[/?INST\]|<</?SYS>>", re.IGNORECASE)


def _escape(match: re.Match[str]) -> str:
    text = match.group(0)
    if text.startswith("["):
        return text.replace("[", "&#91;").replace("]", "&#93;")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def neutralize_untrusted_tags_counted(text: str) -> tuple[str, int]:
    """``text`` with reserved markers made inert, and how many were rewritten."""
    if "<" not in text and "[" not in text:
        return text, 0
    result, tags = _TAG.subn(_escape, text)
    result, tokens = _TEMPLATE_TOKEN.subn(_escape, result)
    return result, tags + tokens


def neutralize_untrusted_tags(text: str) -> str:
    """``text`` with reserved markers made inert (see the module docstring)."""
    return neutralize_untrusted_tags_counted(text)[0]
