"""ASGI app served beside the LangGraph API (``langgraph.json`` ``http.app``).

Routes live in ``app/routes/``; each module exposes ``routes``. The lifespan
checks the thread file store, starts the sandbox provider's background work
with the server (for the Kubernetes provider: orphan reconciliation, the idle
reaper and the maintenance Lease) rather than on the first run after a
restart, and stops it on shutdown.

**Shutdown order.** The server enters its own lifespan first and ours second,
so ours exits first, while the server's queue workers still run the in-flight
runs it is about to drain. Closing the provider then would take their
sandboxes away mid-run. So on exit we first wait until no run holds a sandbox
(at most ``BG_JOB_SHUTDOWN_GRACE_PERIOD_SECS``, the server's own drain
period), then close the provider. ``deploy/`` sets the pod's
``terminationGracePeriodSeconds`` above preStop + twice that period.

``RouteGuardMiddleware`` (``app/guard.py``) puts every route of the server
behind the same auth; ``StateUpdateHygieneMiddleware`` gives direct state writes
the run-input hygiene; ``ThreadCleanupMiddleware`` removes a deleted thread's
files, pod and volume. Conversations waiting for memory extraction are
extracted after the runs drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware

from app.guard import RouteGuardMiddleware
from app.routes import health, policies, skills, uploads, whoami
from app.routes import memory as memory_routes
from app.state_hygiene import StateUpdateHygieneMiddleware
from app.thread_cleanup import ThreadCleanupMiddleware
from memory.queue import get_memory_queue
from runtime.config import aget_settings
from sandbox.base import SandboxProvider
from sandbox.provider import get_sandbox_provider
from sandbox.thread_files import check_file_store
from tools.mcp import close_mcp_managers

__all__ = ["app", "drain_period", "lifespan", "release_after_drain"]

logger = logging.getLogger(__name__)

_DEFAULT_DRAIN = 180.0  # the server's default BG_JOB_SHUTDOWN_GRACE_PERIOD_SECS


def drain_period() -> float:
    """The server's drain period (``BG_JOB_SHUTDOWN_GRACE_PERIOD_SECS``), in seconds."""
    raw = os.environ.get("BG_JOB_SHUTDOWN_GRACE_PERIOD_SECS")
    try:
        return float(raw) if raw else _DEFAULT_DRAIN
    except ValueError:
        return _DEFAULT_DRAIN


async def release_after_drain(
    provider: SandboxProvider, *, timeout: float, poll: float = 0.2
) -> bool:
    """Wait until no run holds a sandbox (or ``timeout``), then close the provider.

    Returns whether the runs drained in time.
    """
    deadline = time.monotonic() + timeout
    drained = True
    while provider.in_use > 0:
        if time.monotonic() >= deadline:
            drained = False
            logger.warning("shutting down with %d sandbox(es) still held by runs", provider.in_use)
            break
        await asyncio.sleep(poll)
    aclose = getattr(provider, "aclose", None)
    if callable(aclose):
        await aclose()
    return drained


@contextlib.asynccontextmanager
async def lifespan(_: Starlette) -> AsyncIterator[None]:
    settings = await aget_settings()
    # Refuse to start on a shared store that is not there: files would land on
    # this pod's disk and no other replica would see them.
    await asyncio.to_thread(check_file_store, settings)
    provider = get_sandbox_provider(settings)
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
        await release_after_drain(provider, timeout=drain_period())
        # Runs have drained: what they queued for memory extraction is extracted now.
        await get_memory_queue().drain()


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
    # ThreadCleanup inside the guard: it acts only for an authenticated caller's delete.
    middleware=[
        Middleware(RouteGuardMiddleware),
        Middleware(StateUpdateHygieneMiddleware),
        Middleware(ThreadCleanupMiddleware),
    ],
)
