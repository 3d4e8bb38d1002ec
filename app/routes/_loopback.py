"""Calls from the project's routes into the LangGraph API in-process, as the caller.

Why loopback instead of touching the server's store or runtime directly: the
request then goes through the same authentication and authorization handlers
as any client's (owner filters, store namespaces forced under the caller), and
only public API routes are used, no server internals.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import httpx
from starlette.requests import Request

__all__ = ["api_request"]

_HOP_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "accept-encoding",
        "expect",
        "upgrade",
    }
)


class _IsolatedASGITransport(httpx.ASGITransport):
    """Each loopback request in its own task and context copy, as a real server runs it.

    LangGraph's auth keeps the authenticated user in a ContextVar it never
    resets; run inline, the loopback request would write into this handler's
    context.
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await asyncio.create_task(
            super().handle_async_request(request), context=contextvars.copy_context()
        )


async def api_request(
    request: Request, method: str, path: str, *, json: Any = None, params: Any = None
) -> httpx.Response:
    """``method path`` on the LangGraph API with the caller's own headers (their auth)."""
    headers = [
        (key, value) for key, value in request.headers.items() if key.lower() not in _HOP_HEADERS
    ]
    transport = _IsolatedASGITransport(app=request.scope["app"])
    async with httpx.AsyncClient(transport=transport, base_url="http://loopback") as client:
        return await client.request(method, path, headers=headers, json=json, params=params)
