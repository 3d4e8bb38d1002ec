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
        lead = {m["name"]: m for m in body["lead_agent"]["middlewares"]}
        audit = lead["ConfiguredAudit"]
        assert audit["parameters"] == {"level": "info", "since": None, "limit": 9}
        observer = lead["extension_tests_support_demo_extension_install_ToolObserver_0"]
        assert observer["extension"] == "tests.support.demo_extension:install"
        names = list(lead)
        assert names.index("ConfiguredAudit") < names.index("TerminalResponseMiddleware")
        assert body["lead_agent"]["policy_hash"].startswith("sha256:")
        subagent = [m["name"] for m in body["subagent"]["middlewares"]]
        assert "ConfiguredAudit" in subagent and subagent[-1].startswith("extension_")
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
