"""``/memory``: a user sees and erases what the agent remembers about them.

- ``GET /memory``: the caller's memories, newest first.
- ``DELETE /memory/{memory_id}``: forget one (404 when the caller has no such memory,
  which is also what another user's id answers).
- ``DELETE /memory``: forget everything.

Behind the same authentication as the other routes; every read and delete goes
through the LangGraph store API in-process as the caller, so the store's auth
handler keeps the namespace under the caller's own id: these routes cannot
address anybody else's memories even by construction.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.routes._loopback import api_request
from auth.access import resolve_request_caller
from memory.records import MEMORY_NAMESPACE, Memory

__all__ = ["routes"]

_PAGE = 1000


class _Item:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.key = raw.get("key")
        self.value = raw.get("value")


async def _caller_or_error(request: Request) -> JSONResponse | None:
    try:
        caller = await resolve_request_caller(request)
    except HTTPException as exc:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
    if caller.delegated:
        return JSONResponse(
            {"detail": "a subagent delegation token cannot use memory"}, status_code=403
        )
    return None


async def _items(request: Request) -> list[dict[str, Any]]:
    response = await api_request(
        request,
        "POST",
        "/store/items/search",
        json={"namespace_prefix": [MEMORY_NAMESPACE], "limit": _PAGE},
    )
    if response.status_code != 200:
        raise HTTPException(response.status_code, response.text)
    items = response.json().get("items") or []
    return [item for item in items if isinstance(item, dict)]


async def list_memory(request: Request) -> Response:
    if (refused := await _caller_or_error(request)) is not None:
        return refused
    memories = [m for raw in await _items(request) if (m := Memory.from_item(_Item(raw)))]
    memories.sort(key=lambda m: m.updated_at, reverse=True)
    return JSONResponse({"memories": [m.as_dict() for m in memories]})


async def _delete(request: Request, key: str) -> int:
    response = await api_request(
        request, "DELETE", "/store/items", json={"namespace": [MEMORY_NAMESPACE], "key": key}
    )
    return response.status_code


async def delete_one(request: Request) -> Response:
    if (refused := await _caller_or_error(request)) is not None:
        return refused
    key = request.path_params["memory_id"]
    found = await api_request(
        request, "GET", "/store/items", params={"namespace": MEMORY_NAMESPACE, "key": key}
    )
    if found.status_code == 404 or (found.status_code == 200 and not found.json()):
        return JSONResponse({"detail": "memory not found"}, status_code=404)
    if found.status_code != 200:
        return JSONResponse({"detail": found.text}, status_code=found.status_code)
    status = await _delete(request, key)
    if status not in (200, 204):
        return JSONResponse({"detail": "delete failed"}, status_code=status)
    return Response(status_code=204)


async def delete_all(request: Request) -> Response:
    if (refused := await _caller_or_error(request)) is not None:
        return refused
    deleted = 0
    for raw in await _items(request):
        if isinstance(raw.get("key"), str) and await _delete(request, raw["key"]) in (200, 204):
            deleted += 1
    return JSONResponse({"deleted": deleted})


routes = [
    Route("/memory", list_memory, methods=["GET"]),
    Route("/memory", delete_all, methods=["DELETE"]),
    Route("/memory/{memory_id}", delete_one, methods=["DELETE"]),
]
