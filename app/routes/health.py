"""``GET /health``: version and configured models, never secrets."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from runtime.config import ConfigError, aget_settings

__all__ = ["routes"]


def _version() -> str:
    try:
        return version("deerflow-server")
    except PackageNotFoundError:
        return "0.1.0"


async def health(request: Request) -> JSONResponse:
    try:
        settings = await aget_settings()
    except ConfigError as exc:
        return JSONResponse({"status": "error", "error": str(exc)}, status_code=500)
    models = [
        {
            "name": entry.name,
            "display_name": entry.display_name or entry.name,
            "supports_vision": entry.supports_vision,
            "supports_thinking": entry.supports_thinking,
            "context_window": entry.context_window,
            "default": index == 0,
        }
        for index, entry in enumerate(settings.models)
    ]
    return JSONResponse({"status": "ok", "version": _version(), "models": models})


routes = [Route("/health", health, methods=["GET"])]
