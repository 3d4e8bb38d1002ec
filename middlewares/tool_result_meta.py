"""``deerflow_tool_meta``: the structured status every tool result carries.

One function, ``normalize_tool_result``, stamps it, so every producer (the
tool-error handler, guard middlewares that short-circuit a call, receipts)
writes the same five keys with the same vocabulary:

- ``status``: ``"success"`` or ``"error"``
- ``error_type``: ``None`` on success, else one of ``ERROR_TYPES``
- ``recoverable_by_model``: whether the model can fix it by changing its call
- ``recommended_next_action``: one sentence for the model (``None`` on success)
- ``source``: who produced the result (``"tool"``, ``"tool_error_handling"``,
  or the short-circuiting middleware's name)

Usage::

    stamped = normalize_tool_result(message)                        # a normal result
    stamped = normalize_tool_result(message, error=exc,
                                    source="tool_error_handling")   # an exception
    stamped = normalize_tool_result(message, error_type="blocked",
                                    source="sandbox_audit")         # a guard's block

Existing valid metadata wins (first writer), so an inner guard's stamp survives
the outer error handler; malformed persisted metadata is replaced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Literal

from langchain_core.messages import ToolMessage

__all__ = [
    "ERROR_TYPES",
    "TOOL_META_KEY",
    "classify_tool_exception",
    "normalize_tool_result",
    "read_tool_meta",
]

TOOL_META_KEY = "deerflow_tool_meta"

# error_type -> (recoverable_by_model, recommended_next_action)
ERROR_TYPES: dict[str, tuple[bool, str]] = {
    "invalid_arguments": (
        True,
        "Fix the arguments so they match the tool's schema, then call it again.",
    ),
    "unknown_tool": (True, "Call one of the tools that are available instead."),
    "not_found": (
        True,
        "Check the path or identifier (list the directory first), then try again.",
    ),
    "invalid_path": (True, "Use a path under /mnt/user-data (or /mnt/skills for reading)."),
    "permission_denied": (True, "Use a path or resource you are allowed to access."),
    "timeout": (
        True,
        "Retry with a smaller or faster operation, or continue without this result.",
    ),
    "transient": (True, "Retry the call once; if it fails again, continue without it."),
    "blocked": (False, "Do not repeat this call; choose a different approach."),
    "read_required": (
        True,
        "Call read_file on the file to see its current content, then retry the write.",
    ),
    "unsupported": (True, "Use a different tool or approach for this step."),
    "tool_error": (
        True,
        "Read the error, adjust the call, and try again or continue without it.",
    ),
    "internal_error": (False, "Do not retry; tell the user this tool failed."),
}

_Status = Literal["success", "error"]


def classify_tool_exception(error: BaseException) -> str:
    """The ``error_type`` for an exception a tool raised."""
    names = {cls.__name__ for cls in type(error).__mro__}
    if names & {"ToolInvocationError", "ValidationError", "ValidationErrorGroup"}:
        return "invalid_arguments"
    if "SandboxPathError" in names:
        return "invalid_path"
    if isinstance(error, FileNotFoundError | NotADirectoryError | IsADirectoryError):
        return "not_found"
    if isinstance(error, PermissionError):
        return "permission_denied"
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        return "timeout"
    if isinstance(error, ConnectionError):
        return "transient"
    if isinstance(error, NotImplementedError):
        return "unsupported"
    if isinstance(error, MemoryError | RecursionError):
        return "internal_error"
    return "tool_error"


def _error_type_from_message(message: ToolMessage) -> str:
    text = message.content if isinstance(message.content, str) else ""
    lowered = text[:2000].lower()
    if "is not a valid tool" in lowered:
        return "unknown_tool"
    if (
        lowered.startswith("error invoking tool")
        or "validation error" in lowered
        or "invalid arguments" in lowered
    ):
        return "invalid_arguments"
    return "tool_error"


def read_tool_meta(message: ToolMessage) -> dict[str, Any] | None:
    """The message's metadata if it is well formed, else None."""
    raw = (message.additional_kwargs or {}).get(TOOL_META_KEY)
    if not isinstance(raw, Mapping):
        return None
    status = raw.get("status")
    if status not in ("success", "error"):
        return None
    error_type = raw.get("error_type")
    if error_type is not None and not isinstance(error_type, str):
        return None
    if not isinstance(raw.get("recoverable_by_model"), bool):
        return None
    action = raw.get("recommended_next_action")
    if action is not None and not isinstance(action, str):
        return None
    if not isinstance(raw.get("source"), str):
        return None
    return dict(raw)


def normalize_tool_result(
    message: ToolMessage,
    *,
    source: str = "tool",
    error: BaseException | None = None,
    error_type: str | None = None,
) -> ToolMessage:
    """A copy of ``message`` carrying valid ``deerflow_tool_meta``.

    ``error`` (the exception a tool raised) or ``error_type`` (a key of
    ``ERROR_TYPES``) mark the result as an error; otherwise the status follows
    ``message.status``. The returned message's ``status`` agrees with the meta.
    """
    existing = read_tool_meta(message)
    if existing is not None:
        if (existing["status"] == "error") == (message.status == "error"):
            return message
        return message.model_copy(update={"status": existing["status"]})
    status: _Status = (
        "error"
        if error is not None or error_type is not None or message.status == "error"
        else "success"
    )
    meta: dict[str, Any]
    if status == "success":
        meta = {
            "status": "success",
            "error_type": None,
            "recoverable_by_model": True,
            "recommended_next_action": None,
            "source": source,
        }
    else:
        kind = error_type or (
            classify_tool_exception(error)
            if error is not None
            else _error_type_from_message(message)
        )
        recoverable, action = ERROR_TYPES.get(kind, ERROR_TYPES["tool_error"])
        meta = {
            "status": "error",
            "error_type": kind,
            "recoverable_by_model": recoverable,
            "recommended_next_action": action,
            "source": source,
        }
    kwargs = {**(message.additional_kwargs or {}), TOOL_META_KEY: meta}
    return message.model_copy(update={"additional_kwargs": kwargs, "status": status})
