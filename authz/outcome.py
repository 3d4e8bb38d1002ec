"""``AuthorizationOutcome``: the neutral record of one gate decision, shared by publisher and consumers.

GuardrailMiddleware publishes one per tool call into the run's context under
``__authorization_outcome`` keyed by ``tool_call_id``; consumers (ToolProgress)
pop it. The ``__`` prefix is what run-input hygiene strips from callers, so a
forged outcome never reaches a consumer. When the run's context is not a
mutable mapping (a typed context object), a bounded per-run registry holds it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AUTHORIZATION_OUTCOME_KEY", "AuthorizationOutcome", "pop_outcome", "publish_outcome"]

AUTHORIZATION_OUTCOME_KEY = "__authorization_outcome"
_MAX_PENDING = 4096


@dataclass(frozen=True)
class AuthorizationOutcome:
    """What a gate decided for one call (no argument values)."""

    tool_call_id: str
    tool_name: str
    allowed: bool
    provider: str | None = None
    rule: str | None = None
    reason: str | None = None


_lock = threading.Lock()
_pending: OrderedDict[tuple[str, str], AuthorizationOutcome] = OrderedDict()


def _context_map(runtime: Any) -> MutableMapping[str, Any] | None:
    context = getattr(runtime, "context", None)
    return context if isinstance(context, MutableMapping) else None


def publish_outcome(runtime: Any, run_key: tuple[str, str], outcome: AuthorizationOutcome) -> None:
    context = _context_map(runtime)
    if context is not None:
        bucket = context.get(AUTHORIZATION_OUTCOME_KEY)
        if not isinstance(bucket, dict):
            bucket = context[AUTHORIZATION_OUTCOME_KEY] = {}
        bucket[outcome.tool_call_id] = outcome
        return
    with _lock:
        _pending[(run_key[1], outcome.tool_call_id)] = outcome
        while len(_pending) > _MAX_PENDING:
            _pending.popitem(last=False)


def pop_outcome(
    runtime: Any, run_key: tuple[str, str], tool_call_id: str
) -> AuthorizationOutcome | None:
    context = _context_map(runtime)
    if context is not None:
        bucket = context.get(AUTHORIZATION_OUTCOME_KEY)
        found = bucket.pop(tool_call_id, None) if isinstance(bucket, dict) else None
        return found if isinstance(found, AuthorizationOutcome) else None
    with _lock:
        return _pending.pop((run_key[1], tool_call_id), None)
