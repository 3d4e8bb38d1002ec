"""ASGI app served beside the LangGraph API (``langgraph.json`` ``http.app``).

Routes live in ``app/routes/``; each module exposes ``routes``.
"""

from __future__ import annotations

from starlette.applications import Starlette

from app.routes import health, whoami

__all__ = ["app"]

app = Starlette(routes=[*health.routes, *whoami.routes])
