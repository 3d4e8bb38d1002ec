"""Every route the server exposes needs credentials (issue 13 items 1, 3 and 10).

The routes are enumerated from the running app itself, so a route a new
``langgraph-api`` adds is swept too; the only routes that answer without
credentials are ``PUBLIC_ROUTES`` (health probes), written out here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.routing import Mount, WebSocketRoute

from app.guard import DEV_ONLY_PREFIXES, PUBLIC_ROUTES
from auth.api_keys import hash_api_key
from tests.auth.conftest import bearer

pytestmark = pytest.mark.server

# The explicit exception list of the acceptance criterion.
EXPECTED_PUBLIC = {("GET", "/ok"), ("GET", "/"), ("GET", "/health")}
STUDIO = {"x-auth-scheme": "langsmith"}
FOREIGN = "https://evil.example"
KEY = "dfk_test_" + "k" * 40
_PARAM = re.compile(r"\{([^}:]+)(?::[^}]+)?\}")


def iter_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path template) of every HTTP route, through mounts."""
    for route in routes:
        if isinstance(route, Mount):
            yield from iter_routes(list(route.routes), prefix + route.path)
        elif isinstance(route, WebSocketRoute):
            yield "WEBSOCKET", prefix + route.path
        else:
            for method in sorted(getattr(route, "methods", None) or {"GET"}):
                if method != "HEAD":
                    yield method, prefix + route.path


def server_routes(app: Any) -> list[tuple[str, str]]:
    return sorted(set(iter_routes(list(app.routes))))


def concrete(template: str) -> str:
    """A request path for a route template: ids become fresh UUIDs."""
    return _PARAM.sub(lambda m: str(uuid.uuid4()) if "id" in m.group(1) else "x", template)


def normalized(template: str) -> str:
    """A template without converters or a trailing slash, for comparing route lists."""
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", template).rstrip("/") or "/"


async def sweep(client: httpx.AsyncClient, headers: dict[str, str], app: Any) -> dict[Any, int]:
    """Status of every non-public route with ``headers``."""
    found: dict[Any, int] = {}
    for method, template in server_routes(app):
        if method == "WEBSOCKET" or (method, template) in EXPECTED_PUBLIC:
            continue
        response = await client.request(method, concrete(template), headers=headers, json={})
        found[(method, template)] = response.status_code
    return found


def test_the_exception_list_is_explicit() -> None:
    assert set(PUBLIC_ROUTES) == EXPECTED_PUBLIC


async def test_every_route_needs_credentials_in_jwt_mode(
    lg_server: Any, jwt_mode: Callable[..., Any], raw: Callable[..., httpx.AsyncClient]
) -> None:
    jwt_mode()
    routes = server_routes(lg_server)
    # The routes of the issue are among those enumerated (the sweep is not vacuous).
    templates = {template for _, template in routes}
    assert {"/internal/truncate", "/metrics", "/deploy", "/policies", "/info"} <= templates
    assert any(t.startswith("/internal/debug/thread/") for t in templates)
    async with raw() as client:
        for headers, expected in (
            ({}, 401),
            ({"Authorization": "Bearer not.a.token"}, 401),
            (STUDIO, 403),  # Studio policy deny, on every route (item 10)
        ):
            statuses = await sweep(client, headers, lg_server)
            wrong = {route: s for route, s in statuses.items() if s != expected}
            assert not wrong, f"{headers}: {wrong}"
        for method, path in EXPECTED_PUBLIC:
            assert (await client.request(method, path)).status_code == 200


async def test_every_route_needs_credentials_in_api_key_mode(
    lg_server: Any, configure: Callable[..., Any], raw: Callable[..., httpx.AsyncClient]
) -> None:
    configure(
        auth={"mode": "api_key", "api_keys": [{"identity": "alice", "sha256": hash_api_key(KEY)}]}
    )
    async with raw() as client:
        for headers in ({}, {"x-api-key": "dfk_wrong"}, {"Authorization": "Bearer dfk_wrong"}):
            statuses = await sweep(client, headers, lg_server)
            wrong = {route: s for route, s in statuses.items() if s != 401}
            assert not wrong, f"{headers}: {wrong}"
        # With the key the same routes answer: the guard lets real callers through.
        assert (await client.get("/metrics", headers={"x-api-key": KEY})).status_code == 200
        assert (await client.get("/auth/whoami", headers={"x-api-key": KEY})).json()[
            "identity"
        ] == "alice"


async def test_dev_only_routes_are_gone_for_authenticated_users(
    lg_server: Any,
    jwt_mode: Callable[..., Any],
    lg_client: Callable[..., Any],
    raw: Callable[..., httpx.AsyncClient],
) -> None:
    jwt_mode()
    bob = lg_client(headers=bearer("bob"))
    thread = await bob.threads.create()
    async with raw(bearer("alice")) as alice:
        assert (await alice.post("/internal/truncate")).status_code == 404
        debug = await alice.get(f"/internal/debug/thread/{thread['thread_id']}")
        assert debug.status_code == 404
        assert (await alice.get("/deploy")).status_code == 404
        metrics = await alice.get("/metrics")
        assert metrics.status_code == 200
    # Bob's thread survived the truncate attempt.
    assert (await bob.threads.get(thread["thread_id"]))["thread_id"] == thread["thread_id"]
    assert all(any(p.startswith(d) for d in DEV_ONLY_PREFIXES) for p in ("/internal/x", "/deploy"))


async def test_policies_follow_the_studio_policy(
    lg_server: Any, jwt_mode: Callable[..., Any], raw: Callable[..., httpx.AsyncClient]
) -> None:
    jwt_mode()
    async with raw(STUDIO) as studio, raw(bearer("alice")) as alice:
        refused = await studio.get("/policies")
        assert refused.status_code == 403
        assert "Studio access is disabled" in refused.json()["detail"]
        assert (await studio.get("/metrics")).status_code == 403
        assert (await alice.get("/policies")).status_code == 200
    jwt_mode(studio="isolated")
    async with raw(STUDIO) as studio:
        assert (await studio.get("/policies")).status_code == 200


async def test_mode_none_keeps_local_development_working(
    lg_server: Any, configure: Callable[..., Any], raw: Callable[..., httpx.AsyncClient]
) -> None:
    configure()
    async with raw() as local:
        assert (await local.get("/metrics")).status_code == 200
        assert (await local.get("/deploy")).status_code != 404
        assert (await local.post("/threads/search", json={})).status_code == 200


async def test_a_foreign_origin_is_refused(
    lg_server: Any, jwt_mode: Callable[..., Any], raw: Callable[..., httpx.AsyncClient]
) -> None:
    jwt_mode()
    async with raw() as client:
        preflight = await client.options(
            "/threads/search",
            headers={
                "Origin": FOREIGN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Private-Network": "true",
            },
        )
        assert preflight.status_code == 403
        assert "access-control-allow-origin" not in preflight.headers
        assert "access-control-allow-private-network" not in preflight.headers
        # A "simple" cross-site request (no preflight in a browser) never runs, even
        # with valid credentials and in mode none (the CSRF path to /internal/truncate).
        simple = await client.post(
            "/threads/search",
            content=b"{}",
            headers={"Origin": FOREIGN, "content-type": "text/plain", **bearer("alice")},
        )
        assert simple.status_code == 403
        assert "access-control-allow-origin" not in simple.headers
        for origin in ("http://localhost:3000", "https://smith.langchain.com"):
            allowed = await client.options(
                "/threads/search",
                headers={
                    "Origin": origin,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Private-Network": "true",
                },
            )
            assert allowed.status_code == 200
            assert allowed.headers["access-control-allow-origin"] == origin
            assert allowed.headers["access-control-allow-private-network"] == "true"
            call = await client.post(
                "/threads/search", json={}, headers={"Origin": origin, **bearer("alice")}
            )
            assert call.status_code == 200
            assert call.headers["access-control-allow-origin"] == origin
        # An allowed front end can read a refusal (it happens before the CORS middleware).
        refused = await client.get("/metrics", headers={"Origin": "http://localhost:3000"})
        assert refused.status_code == 401
        assert refused.headers["access-control-allow-origin"] == "http://localhost:3000"
        # Lookalikes of the allowed origins are foreign.
        for origin in ("http://localhost.evil.example", "https://smith.langchain.com.evil.example"):
            response = await client.post(
                "/threads/search", json={}, headers={"Origin": origin, **bearer("alice")}
            )
            assert response.status_code == 403
    # Mode none too: a foreign page cannot wipe the local server.
    # (configure() resets the config to mode none.)


async def test_a_foreign_origin_cannot_truncate_in_mode_none(
    lg_server: Any, configure: Callable[..., Any], raw: Callable[..., httpx.AsyncClient]
) -> None:
    configure()
    async with raw() as client:
        thread = (await client.post("/threads", json={})).json()
        response = await client.post("/internal/truncate", content=b"", headers={"Origin": FOREIGN})
        assert response.status_code == 403
        kept = await client.get(f"/threads/{thread['thread_id']}")
        assert kept.status_code == 200


def test_route_enumeration_normalizes_templates() -> None:
    assert normalized("/threads/{thread_id:uuid}/x/{path:path}") == "/threads/{thread_id}/x/{path}"
    assert concrete("/a/{name}").startswith("/a/x")


async def test_webhooks_may_not_reach_private_or_loopback_addresses(
    lg_server: Any, jwt_mode: Callable[..., Any], raw: Callable[..., httpx.AsyncClient]
) -> None:
    """langgraph.json ``webhooks.url``: https only, no loopback, no private ranges (item 14)."""
    jwt_mode()
    async with raw(bearer("alice")) as alice:
        thread = (await alice.post("/threads", json={})).json()["thread_id"]
        for hook in (
            "https://10.1.2.3/h",
            "https://172.16.0.1/h",
            "https://192.168.0.1/h",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/h",
            "https://127.0.0.1/h",
            "http://93.184.215.14/h",
            "/threads",
        ):
            response = await alice.post(
                f"/threads/{thread}/runs",
                json={"assistant_id": "lead_agent", "input": {"messages": []}, "webhook": hook},
            )
            assert response.status_code == 422, (hook, response.text)
        assert (await alice.get(f"/threads/{thread}/runs")).json() == []


def test_the_guard_uses_the_servers_own_auth_backend(lg_server: Any) -> None:
    """If langgraph-api moves it, the guard falls back to our handler alone and
    refuses Studio everywhere: this test says so instead of a silent change."""
    from app.guard import _server_auth_backend

    backend = _server_auth_backend()
    assert backend is not None and callable(getattr(backend, "authenticate", None))


async def test_without_the_server_backend_the_guard_still_fails_closed(
    lg_server: Any,
    jwt_mode: Callable[..., Any],
    raw: Callable[..., httpx.AsyncClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import app.guard

    jwt_mode(studio="isolated")
    monkeypatch.setattr(app.guard, "_server_auth_backend", lambda: None)
    async with raw() as client:
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/metrics", headers=STUDIO)).status_code == 403
        assert (await client.get("/metrics", headers=bearer("alice"))).status_code == 200
