"""Test servers leave the developer's own setup alone (issue 22 item 5).

A project whose ``.env`` names an unreachable Postgres and whose
``.langgraph_api`` holds threads: a black-box test server started for it must
neither load that ``.env`` (it would fail to start) nor touch that thread store.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ai_text, write_config
from tests.support.server import PROJECT_ROOT, DevServer, _absolute_paths

pytestmark = pytest.mark.blackbox


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _state_of(project: Path) -> tuple[bytes, dict[str, bytes]]:
    """The user's ``.env`` and thread store, byte for byte (blocking: call off the loop)."""
    return (project / ".env").read_bytes(), _snapshot(project / ".langgraph_api")


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    """A project as a user has it: langgraph.json loading .env, a thread store."""
    project = tmp_path / "project"
    project.mkdir()
    config = json.loads((PROJECT_ROOT / "langgraph.json").read_text())
    config["graphs"] = _absolute_paths(config["graphs"])
    for section in ("auth", "http", "checkpointer"):
        config[section] = _absolute_paths(config[section])
    assert config["env"] == ".env"
    (project / "langgraph.json").write_text(json.dumps(config))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    (project / ".env").write_text(
        f"DEERFLOW_POSTGRES_URI=postgresql://postgres@127.0.0.1:{dead}/mine\n"
        "DEERFLOW_AUTH_MODE=jwt\n"
    )
    return project


async def _user_threads(project: Path, tmp_path: Path, dev_server: Any) -> None:
    """Give the project a real ``.langgraph_api`` holding one thread of the user's."""
    seeder = dev_server(
        env={"LANGGRAPH_DISABLE_FILE_PERSISTENCE": "false"},
        workdir=tmp_path / "seed",
    )
    client: Any = seeder.client()
    await client.threads.create(metadata={"owner": "the user"})
    seeder.stop()  # flushes the thread store
    await asyncio.to_thread(
        shutil.copytree, seeder.workdir / ".langgraph_api", project / ".langgraph_api"
    )


async def test_a_test_server_ignores_the_users_env_and_thread_store(
    tmp_path: Path, user_project: Path, dev_server: Any
) -> None:
    await _user_threads(user_project, tmp_path, dev_server)
    before_env, before_store = await asyncio.to_thread(_state_of, user_project)
    assert ".langgraph_ops.pckl" in before_store
    config = await asyncio.to_thread(write_config, tmp_path, [ai_text("hermetic")])
    server = dev_server(
        env={"DEERFLOW_CONFIG": str(config), "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "false"},
        project_root=user_project,
    )
    client: Any = server.client()  # no token: the .env's auth mode jwt is not in force
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"], "lead_agent", input={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert result["messages"][-1]["content"] == "hermetic"
    server.stop()

    assert await asyncio.to_thread(_state_of, user_project) == (before_env, before_store)
    own_store = server.workdir / ".langgraph_api"
    assert await asyncio.to_thread(own_store.is_dir)  # the server's own store


def test_no_test_server_runs_in_the_developers_checkout(tmp_path: Path) -> None:
    """``langgraph dev`` rewrites ``.langgraph_api`` in its working directory on
    shutdown even with file persistence off: only a project copy may be used."""
    with pytest.raises(ValueError, match="project copy"):
        DevServer(tmp_path / "x.log", project_root=PROJECT_ROOT, watch_project=True)
