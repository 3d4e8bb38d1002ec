"""The public contract for DeerFlow extensions (spec 004, "Middleware Contributions").

An extension is a module named in ``plugins:``; its ``install(registry, config)``
registers contributors. A contributor returns ``MiddlewarePlacement``\\s for the
chain being assembled; the host places each at its placement's anchor, wraps it
in an ``IsolatedMiddleware`` (observe-only, failure-isolated), and names it
``extension_<entry point>_<class>_<n>`` in traces. Per-run state belongs in the
task store (``task_store_from_runtime``), never on the middleware instance.

Message provenance helpers live in ``deerflow_extension_api.provenance``.
"""

from deerflow_extension_api._isolation import IsolatedMiddleware, trace_name
from deerflow_extension_api._placement import ExtensionOrderingError
from deerflow_extension_api._plugins import ExtensionRegistry
from deerflow_extension_api._store import ExtensionData, task_store_from_runtime
from deerflow_extension_api._types import (
    AgentBuildContext,
    AgentScope,
    HostPolicySnapshot,
    MiddlewareContributor,
    MiddlewarePlacement,
    Placement,
)

__all__ = [
    "AgentBuildContext",
    "AgentScope",
    "ExtensionData",
    "ExtensionOrderingError",
    "ExtensionRegistry",
    "HostPolicySnapshot",
    "IsolatedMiddleware",
    "MiddlewareContributor",
    "MiddlewarePlacement",
    "Placement",
    "task_store_from_runtime",
    "trace_name",
]
