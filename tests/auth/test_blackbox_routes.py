"""Black box: every route ``langgraph dev`` serves needs credentials (issue 13 items 1, 3, 14).

The route list comes from the app itself (the in-process server is built from
the same ``langgraph.json`` with the same in-memory runtime), and the dev
server's own OpenAPI document is checked against it, so a route that only
``langgraph dev`` mounts is caught too.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.api_keys import hash_api_key
from tests.auth.conftest import SECRET, bearer
from tests.auth.test_route_guard import (
    EXPECTED_PUBLIC,
    FOREIGN,
    STUDIO,
    concrete,
    normalized,
    server_routes,
)
from tests.support.scripted import ai_text, write_config

pytestmark = pytest.mark.blackbox

KEY = "dfk_blackbox_" + "b" * 40


async def _sweep(
    url: str, routes: list[tuple[str, str]], headers: dict[str, str]
) -> dict[Any, int]:
    found: dict[Any, int] = {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        for method, template in routes:
            if method == "WEBSOCKET" or (method, template) in EXPECTED_PUBLIC:
                continue
            response = await http.request(method, concrete(template), headers=headers, json={})
            found[(method, template)] = response.status_code
    return found


def _start(dev_server: Any, tmp_path: Path, auth: dict[str, Any], **sections: Any) -> Any:
    config = write_config(tmp_path, [ai_text("hi")], auth=auth, **sections)
    return dev_server(env={"DEERFLOW_CONFIG": str(config), "DEERFLOW_DATA_ROOT": str(tmp_path)})


@pytest.mark.parametrize("mode", ["jwt", "api_key"])
async def test_every_dev_server_route_needs_credentials(
    mode: str, tmp_path: Path, dev_server: Any, lg_server: Any
) -> None:
    if mode == "jwt":
        auth: dict[str, Any] = {"mode": "jwt", "jwt": {"secret": SECRET}}
        good, bad = bearer("alice"), {"Authorization": "Bearer a.b.c"}
    else:
        auth = {"mode": "api_key", "api_keys": [{"identity": "alice", "sha256": hash_api_key(KEY)}]}
        good, bad = {"x-api-key": KEY}, {"x-api-key": "dfk_wrong"}
    server = await _asyncify(_start, dev_server, tmp_path, auth)
    routes = server_routes(lg_server)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        spec = (await http.get("/openapi.json", headers=good)).json()
        assert (await http.get("/openapi.json")).status_code == 401
    templates = {normalized(t) for _, t in routes}
    missing = {p for p in spec["paths"] if normalized(p) not in templates}
    assert not missing, f"the dev server serves routes the sweep does not know: {missing}"
    for headers, expected in (({}, 401), (bad, 401), (STUDIO, 403)):
        statuses = await _sweep(server.url, routes, headers)
        wrong = {route: s for route, s in statuses.items() if s != expected}
        assert not wrong, f"{mode} {headers}: {wrong}"
    async with httpx.AsyncClient(base_url=server.url, timeout=30, headers=good) as http:
        assert (await http.get("/ok")).status_code == 200
        assert (await http.get("/metrics")).status_code == 200
        thread = (await http.post("/threads", json={})).json()["thread_id"]
        assert (await http.post("/internal/truncate")).status_code == 404
        assert (await http.get(f"/internal/debug/thread/{thread}")).status_code == 404
        assert (await http.get(f"/threads/{thread}")).status_code == 200


async def test_dev_server_cors_webhooks_and_run_cap(tmp_path: Path, dev_server: Any) -> None:
    server = await _asyncify(
        _start,
        dev_server,
        tmp_path,
        {"mode": "jwt", "jwt": {"secret": SECRET}},
        runs={"max_active_per_user": 1},
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        preflight = {
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Private-Network": "true",
        }
        foreign = await http.options("/threads/search", headers={"Origin": FOREIGN, **preflight})
        assert foreign.status_code == 403
        assert "access-control-allow-origin" not in foreign.headers
        assert "access-control-allow-private-network" not in foreign.headers
        simple = await http.post(
            "/internal/truncate",
            content=b"",
            headers={"Origin": FOREIGN, "content-type": "text/plain"},
        )
        assert simple.status_code == 403
        local = await http.options(
            "/threads/search", headers={"Origin": "http://localhost:5173", **preflight}
        )
        assert local.status_code == 200
        assert local.headers["access-control-allow-origin"] == "http://localhost:5173"
        # Private Network Access: granted to allowed origins under langgraph dev only.
        assert local.headers["access-control-allow-private-network"] == "true"
        studio = await http.options(
            "/threads/search", headers={"Origin": "https://smith.langchain.com", **preflight}
        )
        assert studio.headers["access-control-allow-origin"] == "https://smith.langchain.com"
        # Webhooks (langgraph.json "webhooks"): https only, no loopback, no private ranges.
        thread = (await http.post("/threads", json={}, headers=bearer("alice"))).json()["thread_id"]
        for hook in (
            "https://10.0.0.5/hook",
            "https://192.168.1.10/hook",
            "https://127.0.0.1/hook",
            "https://localhost/hook",
            "http://93.184.215.14/hook",
            "/internal/truncate",
        ):
            response = await http.post(
                f"/threads/{thread}/runs",
                json={"assistant_id": "lead_agent", "input": {"messages": []}, "webhook": hook},
                headers=bearer("alice"),
            )
            assert response.status_code == 422, (hook, response.text)
        runs = await http.get(f"/threads/{thread}/runs", headers=bearer("alice"))
        assert runs.json() == []

    # The run cap counts through the dev server's own loopback API. Fresh
    # identities: `langgraph dev` may keep threads of earlier servers on disk.
    carol, dave = bearer(f"carol-{uuid.uuid4().hex[:8]}"), bearer(f"dave-{uuid.uuid4().hex[:8]}")
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        run = {"assistant_id": "lead_agent", "input": {"messages": [["human", "hi"]]}}
        mine = (await http.post("/threads", json={}, headers=carol)).json()["thread_id"]
        held = await http.post(
            f"/threads/{mine}/runs", json={**run, "after_seconds": 600}, headers=carol
        )
        assert held.status_code == 200, held.text
        refused = await http.post("/runs/wait", json=run, headers=carol)
        assert refused.status_code == 429
        others = await http.post("/runs/wait", json=run, headers=dave)
        assert others.status_code == 200
        cancel = f"/threads/{mine}/runs/{held.json()['run_id']}/cancel?wait=1&action=rollback"
        assert (await http.post(cancel, headers=carol)).status_code in (200, 202, 204)


async def _asyncify(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Start a dev server off the event loop (starting and polling it block)."""
    import asyncio

    return await asyncio.to_thread(function, *args, **kwargs)
