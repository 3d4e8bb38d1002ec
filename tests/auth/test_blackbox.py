"""Black box: ``langgraph dev`` with auth mode jwt, and a non-dev server with mode none.

The second server is ``langgraph_api.server:app`` under uvicorn *without*
``langgraph dev``'s ``LANGSMITH_LANGGRAPH_API_VARIANT=local_dev``: what a
production LangGraph Server looks like to our auth module. With no auth
configured it must not serve anyone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.authenticate import NONE_OUTSIDE_DEV
from tests.auth.conftest import OTHER_SECRET, PROBE_SCRIPT, PROBE_TOOL, SECRET, bearer, token
from tests.support.scripted import write_config
from tests.support.server import PROJECT_ROOT, free_port, server_env

pytestmark = pytest.mark.blackbox


async def test_langgraph_dev_with_a_jwt_secret(tmp_path: Path, dev_server: Any) -> None:
    data = tmp_path / "data"
    config = write_config(tmp_path, PROBE_SCRIPT, tools=[PROBE_TOOL])
    server = dev_server(
        env={
            "DEERFLOW_CONFIG": str(config),
            "DEERFLOW_DATA_ROOT": str(data),
            "DEERFLOW_AUTH_JWT_SECRET": SECRET,
        }
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        for headers, reason in (
            ({}, "missing bearer token"),
            ({"Authorization": "Bearer x.y"}, "malformed token"),
            ({"Authorization": f"Bearer {token('alice', ttl_seconds=-300)}"}, "token expired"),
            (
                {"Authorization": f"Bearer {token('alice', secret=OTHER_SECRET)}"},
                "invalid signature",
            ),
        ):
            response = await http.post("/threads/search", json={}, headers=headers)
            assert (response.status_code, response.json()) == (401, {"detail": reason})
        studio = await http.post("/threads/search", json={}, headers={"x-auth-scheme": "langsmith"})
        assert studio.status_code == 403
        assert (await http.get("/health")).status_code == 200

    alice, bob = server.client(headers=bearer("alice")), server.client(headers=bearer("bob"))
    thread = await alice.threads.create()
    tid = thread["thread_id"]
    await alice.runs.wait(
        tid,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "hi"}]},
        context={"user_id": "bob", "__forged": 1},
    )
    state = await alice.threads.get_state(tid)
    report = json.loads(
        next(m for m in state["values"]["messages"] if m["type"] == "tool")["content"]
    )
    assert report["user_id"] == "alice" and report["context_user_id"] == "alice"
    assert "__forged" not in report["context_keys"]
    probe = data / "users" / "alice" / "threads" / tid / "user-data" / "outputs" / "auth_probe.json"
    assert json.loads(probe.read_text()) == report

    with pytest.raises(httpx.HTTPStatusError) as refused:
        await bob.threads.get_state(tid)
    assert refused.value.response.status_code == 404
    assert tid not in [t["thread_id"] for t in await bob.threads.search()]
    log = server.log()
    assert "AUTH: mode jwt; Studio policy deny" in log
    assert "BlockingError" not in log and "Blocking call" not in log, log


@contextlib.contextmanager
def non_dev_server(tmp_path: Path, extra_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """``langgraph_api.server:app`` under uvicorn, without the ``local_dev`` variant."""
    env = {**os.environ, **server_env(), **extra_env}
    env.pop("LANGSMITH_LANGGRAPH_API_VARIANT", None)
    # Hermetic: the in-memory runtime keeps (and at shutdown rewrites) .langgraph_api
    # in its working directory, so it runs in a temp dir, never the checkout.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    port = free_port()
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "langgraph_api.server:app", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(log_path.read_text(errors="replace"))
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(log_path.read_text(errors="replace"))
            time.sleep(0.2)
        yield url, log_path
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)


def test_mode_none_outside_langgraph_dev_serves_nobody(tmp_path: Path) -> None:
    config = write_config(tmp_path, PROBE_SCRIPT)
    env = {"DEERFLOW_CONFIG": str(config), "DEERFLOW_DATA_ROOT": str(tmp_path / "data")}
    with non_dev_server(tmp_path, env) as (url, log_path):
        with httpx.Client(base_url=url, timeout=10) as http:
            for method, path, body in (
                ("POST", "/threads", {}),
                ("POST", "/threads/search", {}),
                ("POST", "/assistants/search", {}),
                ("GET", "/auth/whoami", None),
                ("PUT", "/store/items", {"namespace": ["a"], "key": "k", "value": {}}),
            ):
                response = http.request(method, path, json=body)
                assert response.status_code == 403, (path, response.text)
                assert response.json() == {"detail": NONE_OUTSIDE_DEV}
            # Studio's header does not help: there is no Studio backend outside dev.
            studio = http.post("/threads/search", json={}, headers={"x-auth-scheme": "langsmith"})
            assert studio.status_code == 403
            assert http.get("/health").status_code == 200
            assert http.get("/ok").status_code == 200
        log = log_path.read_text(errors="replace")
    assert NONE_OUTSIDE_DEV in log
    assert "!" * 78 in log
