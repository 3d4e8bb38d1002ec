"""ASGI app served beside the LangGraph API (``langgraph.json`` ``http.app``).

Routes live in ``app/routes/``; each module exposes ``routes``. The lifespan
starts the sandbox provider's background work with the server (for the
Kubernetes provider: orphan reconciliation and the idle reaper), rather than on
the first run after a restart, and stops it on shutdown. ``RouteGuardMiddleware``
(``app/guard.py``) puts every route of the server behind the same auth;
``StateUpdateHygieneMiddleware`` gives direct state writes the run-input hygiene.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware

from app.guard import RouteGuardMiddleware
from app.routes import health, policies, skills, uploads, whoami
from app.routes import memory as memory_routes
from app.state_hygiene import StateUpdateHygieneMiddleware
from memory.queue import get_memory_queue
from runtime.config import aget_settings
from sandbox.provider import get_sandbox_provider

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
        # Conversations waiting for memory extraction are extracted before exit.
        await get_memory_queue().drain()
        aclose = getattr(provider, "aclose", None)
        if callable(aclose):
            await aclose()


app = Starlette(
    routes=[
        *health.routes,
        *whoami.routes,
        *uploads.routes,
        *policies.routes,
        *memory_routes.routes,
        *skills.routes,
    ],
    lifespan=lifespan,
    # Outermost under LangGraph Server (default middleware_order): every route the
    # server mounts, its own included, goes through our caller resolution.
    middleware=[Middleware(RouteGuardMiddleware), Middleware(StateUpdateHygieneMiddleware)],
)
