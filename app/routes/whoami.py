"""``GET /auth/whoami``: who the server thinks the caller is (behind the same auth).

Useful to check a token or API key, and to see the safe id under which the
caller's files and store items live. Requires ``http.enable_custom_route_auth``.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from auth.access import resolve_request_caller
from authz.principal import Principal
from authz.setup import authorizer_for
from runtime.config import aget_settings

__all__ = ["routes"]


def _field(user: Any, key: str, default: Any) -> Any:
    try:
        value = user.get(key, default)
    except Exception:
        value = getattr(user, key, default)
    return default if value is None else value


async def whoami(request: Request) -> JSONResponse:
    try:
        caller = await resolve_request_caller(request)
    except HTTPException as exc:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
    user = request.scope["user"]
    roles = [str(r) for r in _field(user, "roles", [])]
    permissions = [str(p) for p in _field(user, "permissions", [])]
    body: dict[str, Any] = {
        "identity": caller.principal,
        "user_id": caller.safe_id,
        "display_name": _field(user, "display_name", caller.principal),
        "auth_mode": "studio" if caller.studio else _field(user, "auth_mode", None),
        "roles": roles,
        "permissions": permissions,
    }
    authorizer = authorizer_for(await aget_settings())
    body["authorization"] = {"enabled": authorizer is not None}
    if authorizer is not None:
        principal = Principal(
            user_id=caller.safe_id, roles=tuple(roles), permissions=tuple(permissions)
        )
        body["authorization"]["effective_roles"] = list(authorizer.effective_roles(principal))
        grants = authorizer.grants(principal)
        body["authorization"]["effective_permissions"] = None if grants is None else list(grants)
    return JSONResponse(body)


routes = [Route("/auth/whoami", whoami, methods=["GET"])]
