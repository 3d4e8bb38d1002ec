"""CompletedSubagentUsageMiddleware (spec 000, number 33, after the guard): child usage before enforcement.

Why a separate entry: ``after_model`` hooks run in reverse registration order,
so registered after TokenBudgetMiddleware this one's ``after_model`` runs
first and attributes terminal subagent usage (once; see
``middlewares._usage``) before the budget is checked. Installed only when both
``token_usage`` and ``token_budget`` are enabled; TokenUsage's own
``before_model`` does the same attribution for the ordinary path.
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langgraph.runtime import Runtime

from middlewares.token_usage import attribute_update
from runtime.state import ThreadState

__all__ = ["CompletedSubagentUsageMiddleware"]


class CompletedSubagentUsageMiddleware(AgentMiddleware[ThreadState, Any]):
    """Backfill terminal child usage into the run's totals ahead of the token budget."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    state_schema = ThreadState

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"attribution": "once_per_result"}

    def after_model(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return attribute_update(state)

    async def aafter_model(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return attribute_update(state)
