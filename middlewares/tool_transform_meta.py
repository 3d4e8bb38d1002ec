"""The ordered trail of rewrites between a tool's raw result and what the model sees.

Every middleware that rewrites a tool result on its way to the model appends
one declared entry to ``additional_kwargs["deerflow_tool_transforms"]`` (spec
000, ToolResultSanitization). The trail is in application order: the last entry
produced the final visible bytes, so observers classify raw-to-visible changes
from facts instead of sniffing the output's wording.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import ToolMessage

__all__ = ["TOOL_TRANSFORMS_KEY", "append_tool_transform", "tool_transforms"]

logger = logging.getLogger(__name__)

TOOL_TRANSFORMS_KEY = "deerflow_tool_transforms"


def tool_transforms(message: ToolMessage) -> list[dict[str, Any]]:
    """The message's valid trail entries (malformed persisted values are skipped)."""
    raw = (message.additional_kwargs or {}).get(TOOL_TRANSFORMS_KEY)
    if not isinstance(raw, list):
        return []
    return [dict(entry) for entry in raw if isinstance(entry, Mapping)]


def append_tool_transform(
    message: ToolMessage,
    *,
    kind: str,
    producer: str,
    details: Mapping[str, Any] | None = None,
) -> ToolMessage:
    """A copy of ``message`` with one more trail entry.

    ``kind`` names the transform (``neutralize_untrusted_tags``,
    ``externalize``, ``pii_redaction``...), ``producer`` the middleware class;
    ``details`` must be JSON-serialisable. A malformed existing trail is
    replaced (and logged) rather than raising.
    """
    kwargs = dict(message.additional_kwargs or {})
    existing = kwargs.get(TOOL_TRANSFORMS_KEY)
    if existing is not None and not isinstance(existing, list):
        logger.warning(
            "tool message %s: replacing a malformed %s value",
            message.tool_call_id,
            TOOL_TRANSFORMS_KEY,
        )
    entry: dict[str, Any] = {"kind": kind, "producer": producer}
    if details:
        entry.update({k: v for k, v in details.items() if k not in entry})
    kwargs[TOOL_TRANSFORMS_KEY] = [*tool_transforms(message), entry]
    return message.model_copy(update={"additional_kwargs": kwargs})
