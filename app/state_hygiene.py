"""Run-input hygiene for direct state writes: ``StateUpdateHygieneMiddleware``.

Why: ``POST /threads/{id}/state`` (``threads.update_state``) and ``POST
/threads`` with ``supersteps`` write channel values straight into a thread's
checkpoint. The server's authorization handler for them sees only the thread
id, never the values, so the hygiene that ``auth.handlers`` applies to run
input (``auth.hygiene``) cannot run there. This middleware applies it to the
request body before the route reads it: forged provenance
(``deerflow_*``, ``original_user_content``) and server-owned channels are
dropped, caller system messages in any encoding answer 422.

It runs inside ``RouteGuardMiddleware``, so only authenticated callers get here.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.guard import refusal_response
from auth.hygiene import RejectedInput, sanitize_state_values, sanitize_thread_create

__all__ = ["StateUpdateHygieneMiddleware"]

logger = logging.getLogger("deerflow.auth")

_STATE_PATH = re.compile(r"/threads/[^/]+/state/?")
_THREADS_PATH = re.compile(r"/threads/?")
# A state update larger than this is refused rather than buffered twice.
_MAX_BODY = 64 * 1024 * 1024


class StateUpdateHygieneMiddleware:
    """Pure ASGI middleware: clean state-update bodies in place of the route.

    Args:
        app: the ASGI app it wraps (Starlette passes it).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path") or "")
        if _STATE_PATH.fullmatch(path):
            clean = _clean_state_update
        elif _THREADS_PATH.fullmatch(path):
            clean = _clean_thread_create
        else:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        if not complete:
            await refusal_response(scope, 413, "request body too large")(scope, receive, send)
            return
        try:
            body = _rewrite(body, clean)
        except RejectedInput as exc:
            await refusal_response(scope, 422, str(exc))(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode("ascii")))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY:
            return b"", False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _clean_state_update(payload: Any) -> list[str]:
    if not isinstance(payload, dict):
        return []
    return sanitize_state_values(payload.get("values"))


def _clean_thread_create(payload: Any) -> list[str]:
    return sanitize_thread_create(payload)


def _rewrite(body: bytes, clean: Any) -> bytes:
    """The body with ``clean`` applied; unparseable bodies pass (the route answers 422)."""
    try:
        payload = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return body
    removed = clean(payload)
    if not removed:
        return body
    logger.info("state update hygiene removed %s", ", ".join(sorted(removed)))
    return json.dumps(payload).encode("utf-8")
