"""The ordered middleware chain (one module per middleware) and its assembly."""

from middlewares._fusion import compose_chain, lazy_chain_spans
from middlewares.chain import (
    build_lead_runtime_middlewares,
    build_middlewares,
    build_subagent_runtime_middlewares,
)

__all__ = [
    "build_lead_runtime_middlewares",
    "build_middlewares",
    "build_subagent_runtime_middlewares",
    "compose_chain",
    "lazy_chain_spans",
]
