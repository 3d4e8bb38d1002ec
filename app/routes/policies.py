"""``GET /policies``: the effective middleware policy of this deployment, read-only.

An operator sees what the lead agent and subagent chains enforce with the
current config: every middleware in order, each configurable one's declared
``release_policy_parameters()``, and a ``policy_hash`` per chain. Query
parameters select the run switches to describe (``model_name``,
``is_plan_mode``, ``subagent_enabled``, ``agent_name``), as a run's context
would. Declarations never contain secrets (see ``middlewares/release_policy.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from deerflow_extension_api import AgentScope, ExtensionOrderingError
from middlewares.chain import ChainInputs, build_middlewares, build_subagent_runtime_middlewares
from middlewares.release_policy import collect_release_policies
from runtime.config import ConfigError, Settings, aget_settings

__all__ = ["routes"]

_SWITCHES = ("model_name", "is_plan_mode", "subagent_enabled", "agent_name")


def _describe(settings: Settings, switches: dict[str, Any]) -> dict[str, Any]:
    """Assemble both chains (blocking on the first call: plugin imports) and describe them."""
    config: Any = {"configurable": switches}
    lead = ChainInputs.from_config(settings, config)
    subagent = ChainInputs.from_config(settings, config, scope=AgentScope.SUBAGENT)
    return {
        "model_name": lead.model.name,
        "switches": {k: v for k, v in lead.effective.items()},
        "lead_agent": collect_release_policies(build_middlewares(lead)),
        "subagent": collect_release_policies(build_subagent_runtime_middlewares(subagent)),
    }


async def policies(request: Request) -> JSONResponse:
    switches = {k: v for k, v in request.query_params.items() if k in _SWITCHES}
    unknown = sorted(set(request.query_params) - set(_SWITCHES))
    if unknown:
        return JSONResponse(
            {"error": f"unknown query parameter(s): {', '.join(unknown)}"}, status_code=400
        )
    try:
        settings = await aget_settings()
        body = await asyncio.to_thread(_describe, settings, switches)
    except (ConfigError, ExtensionOrderingError) as exc:
        return JSONResponse({"status": "error", "error": str(exc)}, status_code=500)
    return JSONResponse(body)


routes = [Route("/policies", policies, methods=["GET"])]
