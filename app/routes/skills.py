"""``GET /skills``: the skills a caller may use, behind the same auth as every route.

Lists each skill with ``name``, ``description``, ``source`` (``public`` or
``custom``), ``enabled``, the virtual ``path`` of its ``SKILL.md``, its
``allowed_tools`` and ``license``. ``?agent_name=`` applies that named agent's
allowlist (``skills.agents``), as a run with that ``agent_name`` would;
disabled skills are listed with ``enabled: false`` (they cannot be activated).
Load warnings (malformed ``SKILL.md``, duplicate names) are returned too, so an
operator sees why a skill is missing.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from auth.access import resolve_request_caller
from runtime.config import ConfigError, aget_settings
from runtime.skills import aget_skill_registry, effective_skill_allowlist

__all__ = ["routes"]

_PARAMS = ("agent_name",)


async def list_skills(request: Request) -> JSONResponse:
    try:
        await resolve_request_caller(request)
    except HTTPException as exc:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
    unknown = sorted(set(request.query_params) - set(_PARAMS))
    if unknown:
        return JSONResponse(
            {"error": f"unknown query parameter(s): {', '.join(unknown)}"}, status_code=400
        )
    try:
        settings = await aget_settings()
        registry = await aget_skill_registry(settings)
    except (ConfigError, OSError) as exc:
        return JSONResponse({"status": "error", "error": str(exc)}, status_code=500)
    allowlist = effective_skill_allowlist(
        {"agent_name": request.query_params.get("agent_name")},
        agent_allowlists=settings.skills.agents,
    )
    skills = [
        skill.public_view()
        for skill in registry.skills.values()
        if allowlist is None or skill.name in allowlist
    ]
    return JSONResponse(
        {
            "enabled": settings.skills.enabled,
            "skills": skills,
            "warnings": list(registry.warnings),
        }
    )


routes = [Route("/skills", list_skills, methods=["GET"])]
