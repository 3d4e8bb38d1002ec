"""One gate in front of every route the server exposes: ``RouteGuardMiddleware``.

Why: LangGraph Server authenticates only its own API (threads, runs,
assistants, store, ...) and, with ``http.enable_custom_route_auth``, our
``app/`` routes. Everything else it mounts answers anyone: ``/metrics``,
``/info``, ``/docs``, ``/openapi.json``, and under ``langgraph dev`` the
in-memory runtime's ``POST /internal/truncate`` (deletes every thread),
``GET /internal/debug/thread/{id}`` (any thread's raw state) and ``/deploy``.
The server's auth also lets the LangGraph Studio header through without
applying our Studio policy on routes that have no authorization handler
(``/policies`` answered Studio in ``deny`` mode).

This middleware is the HTTP app's own middleware, which LangGraph Server runs
outermost (``langgraph.json`` must keep the default ``middleware_order`` and no
``mount_prefix``: both move routes outside it). For every request it:

1. refuses a browser ``Origin`` that is not on the CORS allow-list
   (``http.cors`` in ``langgraph.json``) with 403, before anything else, so a
   foreign web page cannot even send a "simple" cross-site POST;
2. lets CORS preflights through to the CORS middleware (they never reach a
   route) and ``PUBLIC_ROUTES`` (health) through unauthenticated;
3. authenticates the caller with the server's own auth backend (our
   ``auth.handlers`` authenticate handler and the Studio rule) and applies
   ``auth.access.resolve_caller`` (fail closed, Studio policy, mode ``none``
   only under ``langgraph dev``): 401/403 otherwise;
4. answers 404 for ``DEV_ONLY_PREFIXES`` unless the auth mode is ``none``;
5. limits a subagent delegation token to the thread and run routes it needs
   (403 elsewhere: uploads, state writes, copies, the store, ...).

Requests from the server's in-process loopback (``root_path`` ``/noauth``,
which no network request can set) pass: they are the server calling itself.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from langgraph_sdk import Auth
from starlette.authentication import AuthenticationError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from auth.access import resolve_caller
from auth.authenticate import authenticate_request, load_auth_settings

__all__ = [
    "DEV_ONLY_PREFIXES",
    "PUBLIC_ROUTES",
    "RouteGuardMiddleware",
    "origin_allowed",
    "refusal_response",
]

logger = logging.getLogger("deerflow.auth")

# Health probes only: they say "up" and nothing else.
PUBLIC_ROUTES = frozenset({("GET", "/ok"), ("GET", "/"), ("GET", "/health")})
# The in-memory runtime's test and deploy routes: mode ``none`` only.
DEV_ONLY_PREFIXES = ("/internal/", "/internal", "/deploy")
_LOOPBACK_ROOT = "/noauth"


def _cors_config() -> tuple[frozenset[str], re.Pattern[str] | None, bool]:
    """The server's CORS allow-list: (origins, regex, allow everyone)."""
    try:
        from langgraph_api import config as api_config
    except ImportError:  # not running inside LangGraph Server
        return frozenset(), None, True
    cors = getattr(api_config, "CORS_CONFIG", None)
    if not cors:
        origins = list(getattr(api_config, "CORS_ALLOW_ORIGINS", ["*"]))
        return frozenset(origins), None, "*" in origins
    origins = list(cors.get("allow_origins") or [])
    regex = cors.get("allow_origin_regex")
    return frozenset(origins), re.compile(regex) if regex else None, "*" in origins


def origin_allowed(origin: str) -> bool:
    """True when the server's CORS configuration admits ``origin``."""
    origins, regex, everyone = _cors_config()
    if everyone or origin in origins:
        return True
    return regex is not None and regex.fullmatch(origin) is not None


def refusal_response(scope: Scope, status: int, detail: str) -> JSONResponse:
    """A JSON error that an allowed front end (Studio) can read.

    Our middlewares answer outside the server's CORS middleware, so they add
    the allow-origin header themselves, for allowed origins only.
    """
    response = JSONResponse({"detail": detail}, status_code=status)
    origin = Headers(scope=scope).get("origin")
    if origin is not None and origin_allowed(origin):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
    return response


def _server_auth_backend() -> Any:
    """The server's own authentication backend (private to langgraph_api; None if absent).

    Using it means the guard authenticates exactly as the API does, Studio
    header included; without it, ``_fallback_user`` applies our handler alone.
    """
    try:
        from langgraph_api.auth.middleware import auth_middleware
    except Exception:
        return None
    kwargs = getattr(auth_middleware, "kwargs", None)
    return kwargs.get("backend") if isinstance(kwargs, Mapping) else None


async def _fallback_user(connection: HTTPConnection, method: str) -> Any:
    if connection.headers.get("x-auth-scheme") == "langsmith":
        raise HTTPException(status_code=403, detail="LangGraph Studio access is not available")
    raw = {key: value for key, value in connection.scope.get("headers") or []}
    try:
        return await authenticate_request(
            authorization=connection.headers.get("authorization"),
            headers=raw,
            path=connection.url.path,
            method=method,
        )
    except Auth.exceptions.HTTPException as exc:
        raise HTTPException(status_code=exc.status_code, detail=exc.detail) from None


async def _authenticated_user(connection: HTTPConnection, method: str) -> Any:
    backend = _server_auth_backend()
    if backend is None:
        return await _fallback_user(connection, method)
    try:
        result = await backend.authenticate(connection)
    except AuthenticationError as exc:
        status = 401 if getattr(exc, "status_code", None) == 401 else 403
        raise HTTPException(status_code=status, detail=str(exc) or "unauthorized") from None
    except Auth.exceptions.HTTPException as exc:
        raise HTTPException(status_code=exc.status_code, detail=exc.detail) from None
    if result is None:
        raise HTTPException(status_code=401, detail="authentication required")
    return result[1]


# What a subagent delegation token may call: create, run, read, search and
# cancel runs on threads (the handlers then bind it to its own thread ids).
_DELEGATION_ROUTES = (
    ("POST", re.compile(r"/threads(/search)?")),
    ("GET", re.compile(r"/threads/[^/]+(/state|/history|/runs|/stream)?")),
    ("POST", re.compile(r"/threads/[^/]+/history")),
    ("POST", re.compile(r"/threads/[^/]+/runs(/stream|/wait)?")),
    ("GET", re.compile(r"/threads/[^/]+/runs/[^/]+(/join|/stream)?")),
    ("POST", re.compile(r"/threads/[^/]+/runs/[^/]+/cancel")),
)


def _delegation_may_call(method: str, path: str) -> bool:
    return any(m == method and p.fullmatch(path) for m, p in _DELEGATION_ROUTES)


_PNA_REQUEST = b"access-control-request-private-network"


def _without_pna_request(scope: Scope) -> Scope:
    """A preflight from an allowed origin, minus its Private Network Access request.

    Starlette's CORS middleware (as LangGraph Server configures it) refuses any
    preflight that asks for private-network access, which breaks LangGraph
    Studio against ``langgraph dev`` in browsers that enforce it. Foreign
    origins never get here; for allowed ones the grant itself comes from the
    server's ``PrivateNetworkMiddleware``, which ``langgraph dev`` turns on
    (``ALLOW_PRIVATE_NETWORK``) and a production server does not.
    """
    if scope.get("method") != "OPTIONS":
        return scope
    headers = scope.get("headers") or []
    if not any(key.lower() == _PNA_REQUEST for key, _ in headers):
        return scope
    return {**scope, "headers": [(k, v) for k, v in headers if k.lower() != _PNA_REQUEST]}


def _is_dev_only(path: str) -> bool:
    return any(path == p.rstrip("/") or path.startswith(p) for p in DEV_ONLY_PREFIXES)


class RouteGuardMiddleware:
    """Pure ASGI middleware: every route behind the same caller resolution as the API.

    Args:
        app: the ASGI app it wraps (Starlette passes it).

    Example::

        Starlette(routes=..., middleware=[Middleware(RouteGuardMiddleware)])
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        root = str(scope.get("root_path") or "")
        if root == _LOOPBACK_ROOT or root.startswith(_LOOPBACK_ROOT + "/"):
            await self.app(scope, receive, send)
            return
        refusal = await self._refusal(scope)
        if refusal is None:
            await self.app(_without_pna_request(scope), receive, send)
            return
        status, detail = refusal
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
            return
        await refusal_response(scope, status, detail)(scope, receive, send)

    async def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        """None to let the request through, else (status, reason)."""
        headers = Headers(scope=scope)
        method = str(scope.get("method") or "GET").upper()
        path = str(scope.get("path") or "/")
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin):
            logger.warning("refused %s %s from origin %r (not in http.cors)", method, path, origin)
            return 403, "origin not allowed"
        if method == "OPTIONS" and "access-control-request-method" in headers:
            return None  # a CORS preflight: the CORS middleware answers it, no route runs
        if (("GET" if method == "HEAD" else method), path) in PUBLIC_ROUTES:
            return None
        connection = HTTPConnection(scope)
        try:
            user = await _authenticated_user(connection, method)
            caller = await resolve_caller(user)
            if caller.delegated and not _delegation_may_call(method, path):
                return 403, "a subagent delegation token cannot call this route"
            if _is_dev_only(path):
                settings = await load_auth_settings()
                if settings.auth.effective_mode != "none":
                    return 404, "Not Found"
        except HTTPException as exc:
            return exc.status_code, str(exc.detail)
        except Auth.exceptions.HTTPException as exc:
            return exc.status_code, str(exc.detail or "forbidden")
        return None
