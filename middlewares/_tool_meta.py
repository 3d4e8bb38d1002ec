"""``deerflow_tool_meta`` stamping for the guard middlewares (12, 13).

Why a private module: the same metadata is produced for ordinary results by
ToolErrorHandlingMiddleware (spec 15) through ``tool_result_meta.normalize_tool_result``.
The guards short-circuit calls *outside* that middleware, so they stamp their
own results. Everything they need goes through the two functions here, so the
integrator can point them at the shared implementation in one place.

The shape is the spec's: ``status``, ``error_type``, ``recoverable_by_model``,
``recommended_next_action``, ``source``.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import ToolMessage

__all__ = ["TOOL_META_KEY", "blocked_tool_message", "ensure_tool_meta"]

TOOL_META_KEY = "deerflow_tool_meta"

MetaStatus = Literal["success", "error", "partial_success"]


def _meta(
    *,
    status: MetaStatus,
    error_type: str | None,
    recoverable_by_model: bool,
    recommended_next_action: str,
    source: str,
) -> dict[str, Any]:
    return {
        "status": status,
        "error_type": error_type,
        "recoverable_by_model": recoverable_by_model,
        "recommended_next_action": recommended_next_action,
        "source": source,
    }


def blocked_tool_message(
    *,
    content: str,
    tool_call_id: str,
    name: str,
    error_type: str,
    extra_kwargs: dict[str, Any] | None = None,
) -> ToolMessage:
    """An error ``ToolMessage`` for a call a guard refused to run.

    A refused call is the model's to recover from (read first, use another
    command), so it is recoverable and the next action is an alternative.
    """
    additional: dict[str, Any] = dict(extra_kwargs or {})
    additional[TOOL_META_KEY] = _meta(
        status="error",
        error_type=error_type,
        recoverable_by_model=True,
        recommended_next_action="try_alternative",
        source="tool_return",
    )
    return ToolMessage(
        content=content,
        tool_call_id=tool_call_id,
        name=name,
        status="error",
        additional_kwargs=additional,
    )


def ensure_tool_meta(message: ToolMessage) -> ToolMessage:
    """Return ``message`` carrying ``deerflow_tool_meta``, keeping an existing stamp.

    Inner middlewares (ToolErrorHandling) normally stamped it already; when they
    are absent, a minimal stamp is derived from ``message.status`` so consumers
    never see a guard-annotated result without metadata.
    """
    existing = (message.additional_kwargs or {}).get(TOOL_META_KEY)
    if isinstance(existing, dict):
        return message
    failed = message.status == "error"
    additional = dict(message.additional_kwargs or {})
    additional[TOOL_META_KEY] = _meta(
        status="error" if failed else "success",
        error_type="unknown" if failed else None,
        recoverable_by_model=True,
        recommended_next_action="try_alternative" if failed else "continue",
        source="tool_return",
    )
    return message.model_copy(update={"additional_kwargs": additional})
