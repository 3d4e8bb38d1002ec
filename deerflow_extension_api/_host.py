"""The host side of contributions: collect, wrap, place and validate them for one chain."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from deerflow_extension_api._isolation import IsolatedMiddleware, trace_name
from deerflow_extension_api._placement import StackEntry, insert_contributions, validate_ordering
from deerflow_extension_api._plugins import LoadedExtensions
from deerflow_extension_api._store import TaskStoreScope
from deerflow_extension_api._types import AgentBuildContext, AgentScope, MiddlewarePlacement

__all__ = ["apply_contributions", "collect_contributions"]

logger = logging.getLogger("deerflow_extension_api")


def collect_contributions(
    loaded: LoadedExtensions, ctx: AgentBuildContext
) -> list[tuple[str, MiddlewarePlacement]]:
    """``(entry point, placement)`` for ``ctx.scope``, in registration order.

    A contributor that raises adds nothing; an item that is not a
    ``MiddlewarePlacement`` is skipped. Both are logged, neither fails the build.
    """
    result: list[tuple[str, MiddlewarePlacement]] = []
    for registered in loaded.contributors:
        contributor = registered.contributor
        label = type(contributor).__name__
        try:
            items = list(contributor.contribute_middlewares(loaded.app_store, ctx) or ())
        except Exception as exc:
            logger.warning(
                "Extension %s: %s.contribute_middlewares failed and was skipped: %s",
                registered.entry_point,
                label,
                exc,
            )
            continue
        for item in items:
            problem = item.problem() if isinstance(item, MiddlewarePlacement) else "not a placement"
            if problem is not None:
                logger.warning(
                    "Extension %s: %s.contribute_middlewares returned %s, not a valid "
                    "MiddlewarePlacement (%s); the item was skipped",
                    registered.entry_point,
                    label,
                    type(item).__name__,
                    problem,
                )
                continue
            if item.scope & ctx.scope:
                result.append((registered.entry_point, item))
    return result


def apply_contributions(
    stack: Sequence[StackEntry],
    *,
    loaded: LoadedExtensions,
    ctx: AgentBuildContext,
    task_scope: TaskStoreScope,
) -> list[AgentMiddleware[Any, Any]]:
    """The final chain: contributions wrapped, placed at their anchors, invariants checked."""
    if ctx.scope not in (AgentScope.LEAD, AgentScope.SUBAGENT):
        raise ValueError(f"AgentBuildContext.scope must be LEAD or SUBAGENT, got {ctx.scope!r}")
    counters: Counter[tuple[str, str]] = Counter()
    contributions: list[tuple[StackEntry, int]] = []
    for entry_point, item in collect_contributions(loaded, ctx):
        class_name = type(item.middleware).__name__
        index = counters[(entry_point, class_name)]
        counters[(entry_point, class_name)] += 1
        wrapper = IsolatedMiddleware.wrap(
            item.middleware,
            entry_point=entry_point,
            name=trace_name(entry_point, class_name, index),
            task_scope=task_scope,
        )
        contributions.append(
            (
                StackEntry(wrapper, origin=entry_point, kind="extension", placement=item.placement),
                item.order,
            )
        )
    final = insert_contributions(stack, contributions, ctx.scope)
    validate_ordering(final, ctx.scope)
    return [entry.middleware for entry in final]
