"""``make dev`` as a newcomer meets it (issue 22 items 2 and 3).

These run ``scripts/dev.py``, the script ``make dev`` runs, with the reloader
on and in the project directory, as ``make dev`` does (the dev server fixture
keeps the config hermetic: no ``.env``, its own thread store).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.support.server import (
    DevServer,
    free_port,
    hermetic_langgraph_json,
    project_copy,
)

pytestmark = pytest.mark.blackbox


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project: the tree ``make dev`` runs in and the reloader watches."""
    return project_copy(tmp_path / "project")


@contextlib.contextmanager
def port_taken() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def run_dev(
    project: Path,
    port: int,
    *extra: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> tuple[int, str, float]:
    """Run the project's launcher to its end (it must end by itself) in the project
    directory, as ``make dev`` does; return its exit code, output and seconds."""
    tmp_path = project.parent
    config = hermetic_langgraph_json(project, tmp_path / "home")
    full_env = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        **(env or {}),
    }
    script = [sys.executable, str(project / "scripts" / "dev.py")]
    command = [*script, "--host", "127.0.0.1", "--port", str(port), *extra]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "--", "--config", str(config)],
        cwd=project,
        env=full_env,
        capture_output=True,
        timeout=timeout,
        start_new_session=True,
        check=False,
    )
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    return done.returncode, output, time.monotonic() - started


async def test_a_busy_port_fails_at_once_and_says_how_to_pick_another(project: Path) -> None:
    with port_taken() as port:
        code, output, seconds = await asyncio.to_thread(run_dev, project, port)
    assert code != 0
    assert f"port {port}" in output and f"PORT={port + 1} make dev" in output, output
    assert seconds < 10


UNREACHABLE = "postgresql://nobody@127.0.0.1:{port}/deerflow"


async def test_an_unreachable_database_fails_within_seconds_with_the_cause(
    project: Path,
) -> None:
    with port_taken() as dead:  # listening, but it is no Postgres: refused at once
        pass
    env = {"DEERFLOW_POSTGRES_URI": UNREACHABLE.format(port=dead)}
    code, output, seconds = await asyncio.to_thread(run_dev, project, free_port(), env=env)
    assert code == 1
    assert "cannot reach the database" in output and str(dead) in output, output
    assert seconds < 15


async def test_a_failed_start_under_the_reloader_exits_instead_of_hanging(
    project: Path,
) -> None:
    """Past the checks (``--skip-checks``), the server's own failed start ends the launcher."""
    with port_taken() as dead:
        pass
    env = {"DEERFLOW_POSTGRES_URI": UNREACHABLE.format(port=dead)}
    code, output, seconds = await asyncio.to_thread(
        run_dev, project, free_port(), "--skip-checks", env=env, timeout=90
    )
    assert code == 1, output
    assert "PostgresUnavailableError" in output and "failed to start" in output, output
    assert seconds < 60


APP = "print('hello from app.py')\n"
SCRIPT = [
    ai_tools(
        tool_call(
            "write_file",
            description="write the app",
            path="/mnt/user-data/workspace/app.py",
            content=APP,
        )
    ),
    ai_tools(
        tool_call(
            "bash", description="run the app", command="python3 /mnt/user-data/workspace/app.py"
        )
    ),
    ai_text("The app ran."),
]


async def _write_and_run_app(server: DevServer) -> tuple[list[Any], list[Any]]:
    client: Any = server.client()
    thread = await client.threads.create()
    updates: list[Any] = []
    async for part in client.runs.stream(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "write and run app.py"}]},
        stream_mode="updates",
    ):
        if part.event == "updates":
            updates.append(part.data)
    state = await client.threads.get_state(thread["thread_id"])
    return updates, state["values"]["messages"]


def _tool_results(updates: list[Any]) -> list[str]:
    return [
        str(message.get("content"))
        for update in updates
        for node in update.values()
        if isinstance(node, dict)
        for message in node.get("messages") or []
        if isinstance(message, dict) and message.get("type") == "tool"
    ]


async def test_the_agent_writing_and_running_app_py_does_not_reload_make_dev(
    tmp_path: Path, project: Path, dev_server: Any
) -> None:
    config = await asyncio.to_thread(write_config, tmp_path, SCRIPT, data_root="")  # default root
    server = dev_server(
        env={"DEERFLOW_CONFIG": str(config), "DEERFLOW_DATA_ROOT": ""},
        command=[sys.executable, str(project / "scripts" / "dev.py")],
        reload=True,
        project_root=project,
        watch_project=True,
    )
    updates, messages = await _write_and_run_app(server)
    log = await server.alog()
    assert "Reloading" not in log, log
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai", "tool", "ai"]
    assert messages[-1]["content"] == "The app ran."
    results = _tool_results(updates)
    assert len(results) == 2, results  # each tool ran once: no retried run, no doubled events
    assert "hello from app.py" in results[1]
    # The file is in the default data root ($XDG_DATA_HOME/deerflow), not the project.
    root = server.workdir / "xdg-data" / "deerflow"

    def written() -> list[str]:
        return [p.read_text() for p in root.rglob("workspace/app.py")]

    assert await asyncio.to_thread(written) == [APP]


async def test_control_a_data_root_inside_the_project_does_reload(
    tmp_path: Path, project: Path, dev_server: Any
) -> None:
    """The check above can fail: with the data root inside the watched tree (the
    old default ``.deer-flow``), the same run makes the reloader fire."""
    inside = project / ".deer-flow"
    config = await asyncio.to_thread(write_config, tmp_path, SCRIPT, data_root=str(inside))
    server = dev_server(
        env={"DEERFLOW_CONFIG": str(config), "DEERFLOW_DATA_ROOT": str(inside)},
        command=[sys.executable, str(project / "scripts" / "dev.py")],
        reload=True,
        project_root=project,
        watch_project=True,
    )
    with contextlib.suppress(Exception):  # the reload may cut the stream
        await _write_and_run_app(server)
    log = await server.alog()
    for _ in range(100):  # the reloader reports the change asynchronously
        if "Reloading" in log:
            break
        await asyncio.sleep(0.2)
        log = await server.alog()
    assert "Reloading" in log, log
