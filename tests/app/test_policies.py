"""``GET /policies`` through the real LangGraph Server's HTTP app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.scripted import ai_text, write_config

pytestmark = pytest.mark.server

AUDIT = "tests.support.demo_extension:ConfiguredAudit"


def _http(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://deerflow.test"
    )


async def test_policies_describe_both_chains(
    lg_server: Any, tmp_path: Path, use_config: Any
) -> None:
    use_config(
        write_config(
            tmp_path,
            [ai_text("hi")],
            extensions={"middlewares": [{"class": AUDIT, "kwargs": {"limit": 9}}]},
            plugins=[
                {
                    "module": "tests.support.demo_extension",
                    "config": {
                        "contributions": [{"kind": "ToolObserver", "placement": "TOOL_RAW"}]
                    },
                }
            ],
        )
    )
    async with _http(lg_server) as http:
        response = await http.get("/policies", params={"is_plan_mode": "true"})
        assert response.status_code == 200
        body = response.json()
        assert body["switches"]["is_plan_mode"] is True
        lead = body["lead_agent"]["middlewares"]
        assert lead[0]["parameters"] == {"level": "info", "since": None, "limit": 9}
        assert lead[1]["extension"] == "tests.support.demo_extension:install"
        assert body["lead_agent"]["policy_hash"].startswith("sha256:")
        assert next(m["name"] for m in body["subagent"]["middlewares"]) == "ConfiguredAudit"
        bad = await http.get("/policies", params={"nope": "1"})
        assert bad.status_code == 400


async def test_policies_report_config_errors(
    lg_server: Any, tmp_path: Path, use_config: Any
) -> None:
    use_config(write_config(tmp_path, [ai_text("hi")], plugins=["no_such_plugin_module"]))
    async with _http(lg_server) as http:
        response = await http.get("/policies")
    assert response.status_code == 500
    assert "plugins[0]" in response.json()["error"]
