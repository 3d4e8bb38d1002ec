"""Which run a hook executes in, for middlewares that keep per-run bookkeeping.

Middleware instances are long-lived and shared by every run of a process, so
per-run state lives in the instance keyed by (thread, run). Outside a server the
run id may be missing; callers then reset in ``before_agent`` so one invocation
never inherits another's counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.config import get_config, get_stream_writer

__all__ = ["current_run_key", "emit_event", "is_subagent_run"]


def _config() -> Mapping[str, Any]:
    try:
        return get_config()  # read only: no copy (this runs several times a step)
    except RuntimeError:
        return {}


def current_run_key() -> tuple[str, str]:
    """``(thread_id, run_id)`` of the running graph; ``"-"`` where unknown."""
    config = _config()
    configurable = config.get("configurable") or {}
    metadata = config.get("metadata") or {}
    thread_id = configurable.get("thread_id") or metadata.get("thread_id") or "-"
    run_id = metadata.get("run_id") or configurable.get("run_id") or config.get("run_id") or "-"
    return str(thread_id), str(run_id)


def is_subagent_run() -> bool:
    config = _config()
    metadata = config.get("metadata") or {}
    return metadata.get("agent_kind") == "subagent" or metadata.get("lc_agent_name") == "subagent"


def emit_event(event: dict[str, Any]) -> None:
    """Publish a custom stream event; outside a streaming run it is dropped."""
    try:
        writer = get_stream_writer()
    except RuntimeError:
        return
    try:
        writer(event)
    except Exception:  # a broken consumer must never fail the run
        return
