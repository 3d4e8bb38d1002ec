"""Deleting a thread deletes its files: an ASGI middleware around ``DELETE /threads/{id}``.

The LangGraph API deletes the thread (and decides, through our auth handlers,
whether the caller may); this middleware only watches the answer. When it is a
success, the caller's files of that thread (uploads, outputs, workspace) and
the sandbox provider's per-thread resources (Kubernetes pod and workspace
volume) are removed before the response is sent, so a client that saw the
success finds no file of the thread on any replica. The caller is the one the
API authenticated for that request (``scope["user"]``, set by the API's auth
middleware), resolved as every custom route resolves it, so a caller can only
ever remove files in their own bucket.

Threads that disappear otherwise (the server's thread TTL sweep) are not seen
here; their pods are reaped when idle, and their directories stay until an
operator removes them (see ``deploy/README.md``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from auth.access import resolve_request_caller
from auth.identity import make_safe_user_id
from runtime.config import aget_settings
from sandbox.thread_files import delete_thread_files

__all__ = ["ThreadCleanupMiddleware"]

logger = logging.getLogger(__name__)

_THREAD = re.compile(r"^/threads/([^/]+)/?$")


class ThreadCleanupMiddleware:
    """Pure ASGI: costs one regex match on requests that are not a thread deletion."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "DELETE":
            await self.app(scope, receive, send)
            return
        match = _THREAD.match(scope.get("path") or "")
        if match is None:
            await self.app(scope, receive, send)
            return
        thread_id = match.group(1)
        held: list[Message] = []

        async def watch(message: Message) -> None:
            # Hold the response back until the files are gone: a client that saw
            # the 204 must not find the thread's files on any replica.
            if message["type"] == "http.response.start":
                held.append(message)
                return
            if message["type"] == "http.response.body" and held:
                start = held.pop()
                if not message.get("more_body") and 200 <= int(start["status"]) < 300:
                    await _cleanup(scope, thread_id)
                await send(start)
            await send(message)

        await self.app(scope, receive, watch)


async def _cleanup(scope: Scope, raw_thread_id: str) -> None:
    thread_id = make_safe_user_id(raw_thread_id)
    if thread_id != raw_thread_id:
        return  # never a thread id the data root can hold
    try:
        caller: Any = await resolve_request_caller(HTTPConnection(scope))
        settings = await aget_settings()
        await delete_thread_files(settings, caller.safe_id, thread_id)
    except Exception as exc:  # the thread is deleted; its files must not fail the answer
        logger.warning("could not remove the files of deleted thread %s: %s", thread_id, exc)
