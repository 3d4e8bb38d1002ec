"""The LangGraph Studio user's policy, and mode ``none`` outside ``langgraph dev``.

Under ``langgraph dev`` (and the in-process server, which sets the same
``LANGSMITH_LANGGRAPH_API_VARIANT=local_dev``) the server accepts any request
carrying ``x-auth-scheme: langsmith`` as ``StudioUser`` *without calling our
authenticate handler*. Our authorization handlers decide what it may do:

- mode ``none`` (policy ``local``): Studio is the local user.
- other modes, policy ``deny`` (the default): every request is refused.
- policy ``isolated``: Studio is its own user, ``studio:<identity>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from auth.authenticate import NONE_OUTSIDE_DEV
from auth.identity import make_safe_user_id
from runtime.config import get_settings
from tests.auth.conftest import bearer

pytestmark = pytest.mark.server

STUDIO = {"x-auth-scheme": "langsmith"}
STUDIO_PRINCIPAL = "studio:langgraph-studio-user"


async def status_of(call: Any) -> int:
    try:
        await call
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return 200


async def test_mode_none_studio_is_the_local_user(
    configure: Callable[..., Any], lg_client: Callable[..., Any]
) -> None:
    configure(probe=True)
    sdk, studio = lg_client(), lg_client(headers=STUDIO)
    from_sdk = await sdk.threads.create()
    from_studio = await studio.threads.create()
    assert from_studio["metadata"]["owner"] == "default"
    assert (await studio.threads.get(from_sdk["thread_id"]))["thread_id"] == from_sdk["thread_id"]
    assert (await sdk.threads.get(from_studio["thread_id"]))["thread_id"] == from_studio[
        "thread_id"
    ]
    await studio.runs.wait(
        from_studio["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "x"}]},
    )
    state = await sdk.threads.get_state(from_studio["thread_id"])
    report = json.loads(
        next(m for m in state["values"]["messages"] if m["type"] == "tool")["content"]
    )
    assert report["user_id"] == "default"


async def test_jwt_mode_denies_studio_by_default(
    jwt_mode: Callable[..., Any], lg_client: Callable[..., Any], raw: Callable[..., Any]
) -> None:
    jwt_mode()
    studio = lg_client(headers=STUDIO)
    for call in (
        studio.threads.search(),
        studio.threads.create(),
        studio.assistants.search(),
        studio.store.search_items([]),
    ):
        assert await status_of(call) == 403
    async with raw(STUDIO) as client:
        response = await client.post("/threads/search", json={})
        whoami = await client.get("/auth/whoami")
    assert response.status_code == 403
    assert "LangGraph Studio access is disabled" in response.json()["detail"]
    assert whoami.status_code == 403


async def test_isolated_studio_is_its_own_user(
    jwt_mode: Callable[..., Any], lg_client: Callable[..., Any], raw: Callable[..., Any]
) -> None:
    jwt_mode(studio="isolated", probe=True)
    studio, alice = lg_client(headers=STUDIO), lg_client(headers=bearer("alice"))
    hers = await alice.threads.create()
    ours = await studio.threads.create(metadata={"owner": "alice"})
    assert ours["metadata"]["owner"] == STUDIO_PRINCIPAL
    assert await status_of(studio.threads.get(hers["thread_id"])) == 404
    assert await status_of(alice.threads.get(ours["thread_id"])) == 404
    assert hers["thread_id"] not in [t["thread_id"] for t in await studio.threads.search()]
    # Studio sees the registered graphs' assistants, so it can run them.
    assert {a["graph_id"] for a in await studio.assistants.search()} >= {"lead_agent", "subagent"}
    await studio.runs.wait(
        ours["thread_id"], "lead_agent", input={"messages": [{"role": "user", "content": "x"}]}
    )
    state = await studio.threads.get_state(ours["thread_id"])
    report = json.loads(
        next(m for m in state["values"]["messages"] if m["type"] == "tool")["content"]
    )
    safe = make_safe_user_id(STUDIO_PRINCIPAL)
    assert report["user_id"] == safe and safe.startswith("studio_langgraph-studio-user--")
    probe_file = get_settings().data_root_path() / "users" / safe / "threads" / ours["thread_id"]
    assert probe_file.is_dir()
    await studio.store.put_item(["notes"], "k", {"v": 1})
    assert (await studio.store.get_item(["notes"], "k"))["namespace"] == [safe, "notes"]
    assert await alice.store.get_item(["notes"], "k") is None
    # Crons would run as a plain user named after Studio's identity: refused.
    assert (
        await status_of(
            studio.crons.create_for_thread(ours["thread_id"], "lead_agent", schedule="0 0 1 1 *")
        )
        == 403
    )
    async with raw(STUDIO) as client:
        me = (await client.get("/auth/whoami")).json()
    assert me["identity"] == STUDIO_PRINCIPAL and me["auth_mode"] == "studio"


async def test_mode_none_outside_langgraph_dev_refuses_everything(
    configure: Callable[..., Any],
    lg_client: Callable[..., Any],
    raw: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure()
    local = lg_client()
    thread = await local.threads.create()
    monkeypatch.setenv("LANGSMITH_LANGGRAPH_API_VARIANT", "")
    async with raw() as client:
        refused = await client.post("/threads/search", json={})
        whoami = await client.get("/auth/whoami")
        health = await client.get("/health")
    assert refused.status_code == 403
    assert refused.json() == {"detail": NONE_OUTSIDE_DEV}
    assert whoami.status_code == 403
    assert health.status_code == 200
    for call in (local.threads.get(thread["thread_id"]), local.threads.create()):
        assert await status_of(call) == 403
    # Studio requests skip the authenticate handler; the resource handlers refuse them too.
    studio = lg_client(headers=STUDIO)
    for call in (
        studio.threads.search(),
        studio.assistants.search(),
        studio.store.search_items([]),
    ):
        assert await status_of(call) == 403
    monkeypatch.setenv("LANGSMITH_LANGGRAPH_API_VARIANT", "local_dev")
    assert (await local.threads.get(thread["thread_id"]))["thread_id"] == thread["thread_id"]


async def test_invalid_auth_config_refuses_requests(
    raw: Callable[..., Any], lg_client: Callable[..., Any], tmp_path: Any, use_config: Any
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("auth:\n  mode: jwt\n", encoding="utf-8")
    use_config(bad)
    async with raw() as client:
        response = await client.post("/threads/search", json={})
    assert response.status_code == 403
    assert response.json() == {"detail": "server configuration is invalid; see the server log"}
    studio = lg_client(headers=STUDIO)
    assert await status_of(studio.threads.search()) == 403
