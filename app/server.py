"""ASGI app served beside the LangGraph API (``langgraph.json`` ``http.app``).

Routes live in ``app/routes/``; each module exposes ``routes``. The lifespan
starts the sandbox provider's background work with the server (for the
Kubernetes provider: orphan reconciliation and the idle reaper), rather than on
the first run after a restart, and stops it on shutdown.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette

from app.routes import health, policies, uploads, whoami
from runtime.config import aget_settings
from sandbox.provider import get_sandbox_provider
from tools.mcp import close_mcp_managers

__all__ = ["app", "lifespan"]

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def lifespan(_: Starlette) -> AsyncIterator[None]:
    provider = get_sandbox_provider(await aget_settings())
    start = getattr(provider, "start", None)
    if callable(start):
        try:
            await start()
        except Exception:
            # The provider starts again lazily on the first acquire; runs then get
            # a clear tool error while the backend stays unreachable.
            logger.exception("sandbox provider failed to start; it will retry on first use")
    try:
        yield
    finally:
        await close_mcp_managers()
        aclose = getattr(provider, "aclose", None)
        if callable(aclose):
            await aclose()


app = Starlette(
    routes=[*health.routes, *whoami.routes, *uploads.routes, *policies.routes],
    lifespan=lifespan,
)
