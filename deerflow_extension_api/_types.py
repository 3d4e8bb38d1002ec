"""The value types of the middleware contribution contract (spec 004)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from langchain.agents.middleware import AgentMiddleware

if TYPE_CHECKING:
    from deerflow_extension_api._store import ExtensionData

__all__ = [
    "AgentBuildContext",
    "AgentScope",
    "HostPolicySnapshot",
    "MiddlewareContributor",
    "MiddlewarePlacement",
    "Placement",
]


class Placement(enum.Enum):
    """The guarantee a contribution needs; the host resolves it to a position."""

    MODEL_LOGICAL = "model_logical"
    """Model axis, outer end: outer of retry and error handling (once per decision)."""
    MODEL_PHYSICAL = "model_physical"
    """Model axis, inner end: inner of every request transformer (once per provider call)."""
    TOOL_VISIBLE = "tool_visible"
    """Tool axis, outer end: outer of truncation, sanitization and error wrapping."""
    TOOL_RAW = "tool_raw"
    """Tool axis, inner end: adjacent to the real tool callable."""
    STANDARD = "standard"
    """No position requirement (state hooks); relative order is not guaranteed."""


class AgentScope(enum.Flag):
    """Which chains receive a contribution: LEAD, SUBAGENT, or BOTH."""

    LEAD = enum.auto()
    SUBAGENT = enum.auto()
    BOTH = LEAD | SUBAGENT


@dataclass(frozen=True)
class MiddlewarePlacement:
    """One contribution: a middleware instance and where it needs to sit.

    Construction never raises, so one bad item cannot cost a contributor its
    other contributions: the host checks each item (``problem()``) and skips
    an invalid one with a diagnostic (the failure table of the extension
    contract). Call ``validate()`` in your own tests to fail where it is written.
    """

    middleware: AgentMiddleware[Any, Any]
    placement: Placement
    scope: AgentScope = AgentScope.BOTH
    order: int = 0

    def problem(self) -> str | None:
        """Why this item is not a valid contribution, or None when it is."""
        if not isinstance(self.middleware, AgentMiddleware):
            return (
                f"MiddlewarePlacement.middleware must be an AgentMiddleware instance, "
                f"got {type(self.middleware).__name__}"
            )
        if not isinstance(self.placement, Placement):
            return f"MiddlewarePlacement.placement must be a Placement, got {self.placement!r}"
        if not isinstance(self.scope, AgentScope) or not (self.scope & AgentScope.BOTH):
            return f"MiddlewarePlacement.scope must be an AgentScope, got {self.scope!r}"
        if isinstance(self.order, bool) or not isinstance(self.order, int):
            return f"MiddlewarePlacement.order must be an int, got {self.order!r}"
        return None

    def validate(self) -> MiddlewarePlacement:
        """``self`` if valid; raises ``TypeError`` naming the bad field otherwise."""
        problem = self.problem()
        if problem is not None:
            raise TypeError(problem)
        return self


@dataclass(frozen=True)
class HostPolicySnapshot:
    """Host limits a contributor may read (never change) while assembling."""

    token_budget_enabled: bool = False
    """Whether the host enforces a per-run token budget."""
    max_tokens_per_run: int | None = None
    """The token budget of one run, when one is enforced."""
    max_subagents_per_run: int | None = None
    """Lead agent only: how many subagents one run may delegate to."""


@dataclass(frozen=True)
class AgentBuildContext:
    """What a contributor knows about the chain being assembled right now."""

    scope: AgentScope
    """``AgentScope.LEAD`` or ``AgentScope.SUBAGENT``: the chain being built."""
    agent_name: str | None
    """The custom agent or subagent name, when there is one."""
    model_name: str
    """The resolved model name."""
    policy: HostPolicySnapshot
    """Token-budget limits and, for the lead agent, ``max_subagents_per_run``."""


@runtime_checkable
class MiddlewareContributor(Protocol):
    """What ``registry.middlewares(...)`` accepts. Runs on every agent assembly: keep it cheap."""

    def contribute_middlewares(
        self, app_store: ExtensionData, ctx: AgentBuildContext
    ) -> Sequence[MiddlewarePlacement]: ...
