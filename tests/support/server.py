"""A real LangGraph Server for tests: in-process (ASGI) and ``langgraph dev``.

The in-process server reads its registration from the project's
``langgraph.json`` exactly like ``langgraph dev`` does, so what is tested is what
is deployed. ``langgraph_api`` reads its environment at import time: configure
with ``server_env`` before the first import (this leans on langgraph-api
internals; its version range is pinned in ``pyproject.toml``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
from langgraph_sdk.client import LangGraphClient

__all__ = [
    "PROJECT_ROOT",
    "DevServer",
    "RequestScopedASGITransport",
    "asgi_client",
    "free_port",
    "hermetic_langgraph_json",
    "in_process_server",
    "langgraph_json",
    "project_copy",
    "reap_dev_servers",
    "server_blocking_detector_paused",
    "server_env",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def langgraph_json() -> dict[str, Any]:
    return json.loads((PROJECT_ROOT / "langgraph.json").read_text(encoding="utf-8"))


def _absolute(spec: str, base: Path = PROJECT_ROOT) -> str:
    """``./graphs/x.py:attr`` -> an absolute file path; module specs unchanged."""
    path, sep, attr = spec.partition(":")
    if path.endswith(".py"):
        return f"{(base / path).resolve()}{sep}{attr}"
    return spec


def _absolute_paths(value: Any, key: str = "", base: Path = PROJECT_ROOT) -> Any:
    if isinstance(value, dict):
        return {k: _absolute_paths(v, k, base) for k, v in value.items()}
    if (isinstance(value, str) and key in {"path", "app"}) or (
        isinstance(value, str) and value.startswith("./") and ".py:" in value
    ):
        return _absolute(value, base)
    return value


def hermetic_langgraph_json(
    project_root: Path,
    workdir: Path,
    *,
    disable_persistence: bool = False,
    load_env: bool = False,
) -> Path:
    """A copy of ``project_root/langgraph.json`` for a test server, in ``workdir``.

    Paths become absolute and ``env`` is dropped: a test server never loads the
    developer's ``.env`` (a Postgres URI there must not redirect the suite).
    ``disable_persistence`` keeps the server's thread store in memory: needed
    when it runs in the project directory, whose ``.langgraph_api`` is the
    developer's (``langgraph dev`` sets ``LANGGRAPH_DISABLE_FILE_PERSISTENCE``
    from this key, over the environment). ``load_env`` keeps ``env`` (pointing at
    ``project_root``'s file): only for a project copy whose ``.env`` a test wrote.
    """
    config = json.loads((project_root / "langgraph.json").read_text(encoding="utf-8"))
    env = config.pop("env", None)
    if load_env and isinstance(env, str):
        config["env"] = str(project_root / env)
    if disable_persistence:
        config["disable_persistence"] = True
    config["graphs"] = {
        name: _absolute(spec, project_root) for name, spec in config["graphs"].items()
    }
    for section in ("auth", "http", "checkpointer", "store"):
        if section in config:
            config[section] = _absolute_paths(config[section], base=project_root)
    config["dependencies"] = [str(project_root)]
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "langgraph.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def server_env(overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Environment for an in-process server built from ``langgraph.json``.

    ``overrides`` may replace any top-level section (``auth``, ``http``,
    ``checkpointer``, ``store``) with a dict, or drop it with ``None``.
    """
    config = langgraph_json()
    for key, value in (overrides or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    graphs = {name: _absolute(spec) for name, spec in config["graphs"].items()}
    env = {
        "LANGGRAPH_RUNTIME_EDITION": "inmem",
        "DATABASE_URI": ":memory:",
        "REDIS_URI": "fake",
        "MIGRATIONS_PATH": "__inmem",
        "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "true",
        "LANGSMITH_LANGGRAPH_API_VARIANT": "local_dev",
        "LANGSERVE_GRAPHS": json.dumps(graphs),
        "LANGGRAPH_ALLOW_BLOCKING": "false",
        # As `langgraph dev` sets it (Private Network Access preflights).
        "ALLOW_PRIVATE_NETWORK": "true",
        "LANGSMITH_TRACING": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
    }
    for section, variable in (
        ("auth", "LANGGRAPH_AUTH"),
        ("http", "LANGGRAPH_HTTP"),
        ("checkpointer", "LANGGRAPH_CHECKPOINTER"),
        ("store", "LANGGRAPH_STORE"),
        ("webhooks", "LANGGRAPH_WEBHOOKS"),
    ):
        if config.get(section):
            env[variable] = json.dumps(_absolute_paths(config[section]))
    return env


@contextlib.asynccontextmanager
async def in_process_server(overrides: Mapping[str, Any] | None = None) -> AsyncIterator[Any]:
    """Import ``langgraph_api`` with the project's registration and run its lifespan."""
    if "langgraph_api.server" in sys.modules:
        raise RuntimeError("langgraph_api is already imported; one in-process server per process")
    os.environ.update(server_env(overrides))
    if str(PROJECT_ROOT) not in sys.path:
        sys.path.insert(0, str(PROJECT_ROOT))
    # The in-memory runtime creates ``.langgraph_api`` in its working directory on
    # import, loads it at start and rewrites it at shutdown, whatever
    # LANGGRAPH_DISABLE_FILE_PERSISTENCE says: all of it happens in a temp dir,
    # never in the developer's checkout.
    home = tempfile.mkdtemp(prefix="deerflow-inproc-")
    here = os.getcwd()
    os.chdir(home)
    try:
        from langgraph_api.server import app

        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
    finally:
        os.chdir(here)
    try:
        yield app
    finally:
        os.chdir(home)
        try:
            await lifespan.__aexit__(None, None, None)
        finally:
            os.chdir(here)


class RequestScopedASGITransport(httpx.ASGITransport):
    """Runs each request in its own task and context, as a real server does.

    The server keeps the authenticated user in a ContextVar that it never
    resets; over a plain ``ASGITransport`` the app runs in the caller's task,
    so one request's user would leak into the next request of another client.
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await asyncio.create_task(
            super().handle_async_request(request), context=contextvars.copy_context()
        )


def asgi_client(app: Any, *, headers: Mapping[str, str] | None = None) -> LangGraphClient:
    """A ``langgraph_sdk`` client that talks to ``app`` over ASGI (auth enforced)."""
    http = httpx.AsyncClient(
        transport=RequestScopedASGITransport(app=app),
        base_url="http://deerflow.test",
        headers=dict(headers or {}),
        timeout=60,
    )
    return LangGraphClient(http)


# Every dev server a test session starts carries this marker in its environment,
# so the session can reap any that a failed start or teardown left behind.
DEV_SERVER_MARKER = "DEERFLOW_TEST_DEV_SERVER"
TEST_SESSION_ID = uuid.uuid4().hex


def reap_dev_servers(session_id: str = TEST_SESSION_ID) -> int:
    """Kill the process groups of dev servers this session started; return how many."""
    needle = f"{DEV_SERVER_MARKER}={session_id}".encode()
    killed = 0
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle not in environ.split(b"\0"):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)
            killed += 1
    return killed


def _off_loop(function: Callable[..., T], *args: Any) -> T:
    """Run a blocking call in a worker thread when this thread runs an event loop.

    Once the in-process server has started, its blocking-call detector
    (blockbuster) guards this whole process: blocking calls (subprocess, sleep,
    wait) made on the event loop's thread raise. Waiting on a worker is allowed.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return function(*args)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args).result()


@contextlib.contextmanager
def server_blocking_detector_paused() -> Iterator[None]:
    """Pause the in-process server's process-wide blocking-call detector.

    langgraph-runtime-inmem activates blockbuster for the whole process when the
    in-process server starts, with no module scope. Test doubles that emulate
    external systems on the loop (the fake Kubernetes API and exec endpoint) do
    blocking I/O by design; tests that use them pause the global detector and
    check the code under test with their own, module-scoped ``blockbuster_ctx``.
    """
    from blockbuster import BlockBuster

    active = [
        bb
        for bb in gc.get_objects()
        if isinstance(bb, BlockBuster)
        and any(function.activated for function in bb.functions.values())
    ]
    for bb in active:
        bb.deactivate()
    try:
        yield
    finally:
        for bb in active:
            bb.activate()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".env",
    ".langgraph_api",
    ".deer-flow",
    "config.yaml",
    "__pycache__",
    ".*_cache",
    "*.log",
)


def project_copy(target: Path) -> Path:
    """A copy of this checkout's code and config (no ``.env``, state or caches),
    for tests that must run a server in a project directory, as ``make dev`` does."""
    shutil.copytree(PROJECT_ROOT, target, ignore=_NOT_COPIED, symlinks=True)
    return target


class DevServer:
    """``langgraph dev`` in its own process group on a free port (the black box).

    Hermetic: it runs in ``workdir`` (a temp dir) with a copy of the project's
    ``langgraph.json`` that loads no ``.env``, so neither the developer's ``.env``
    nor their ``.langgraph_api`` thread store is read or written. The default
    data root (``$XDG_DATA_HOME/deerflow``) points into ``workdir`` too.

    ``reload=True`` runs with the reloader on, as ``make dev`` does;
    ``watch_project=True`` runs in ``project_root`` (the tree the reloader
    watches under ``make dev``), which must then be a copy (``project_copy``):
    ``langgraph dev`` reads and, on shutdown, rewrites ``.langgraph_api`` in its
    working directory whatever the settings say, so no test server ever runs in
    the developer's own checkout. ``command`` replaces ``python -m langgraph_cli
    dev`` (e.g. with ``scripts/dev.py``).

    The log goes to a file outside the project (a log inside it would make the
    reloader loop). ``langgraph dev`` silently moves to another port when the
    chosen one is busy, so start-up checks that the port answers ``/ok``.
    """

    def __init__(
        self,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        *,
        workdir: Path | None = None,
        project_root: Path = PROJECT_ROOT,
        reload: bool = False,
        watch_project: bool = False,
        command: Sequence[str] | None = None,
        load_env: bool = False,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = dict(env or {})
        self.args = list(args)
        self.workdir = workdir or log_path.parent / f"{log_path.stem}-home"
        self.project_root = project_root
        self.reload = reload
        self.watch_project = watch_project
        self.command = list(command) if command is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        if (watch_project or load_env) and project_root.resolve() == PROJECT_ROOT.resolve():
            raise ValueError("watch_project and load_env need a project copy (see project_copy)")
        self.load_env = load_env

    def start(self, timeout: float = 60.0) -> DevServer:
        """Start and wait for ``/ok``; safe to call from an async test."""
        return _off_loop(self._start, timeout)

    def command_line(self) -> list[str]:
        config = hermetic_langgraph_json(
            self.project_root,
            self.workdir,
            disable_persistence=self.watch_project,
            load_env=self.load_env,
        )
        if self.command is not None:
            base = [*self.command, "--host", "127.0.0.1", "--port", str(self.port), "--"]
        else:
            base = [
                sys.executable,
                "-m",
                "langgraph_cli",
                "dev",
                "--no-browser",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ]
        return [
            *base,
            "--config",
            str(config),
            *([] if self.reload else ["--no-reload"]),
            *self.args,
        ]

    def _start(self, timeout: float) -> DevServer:
        # Tests' dev servers keep their thread store in memory unless a test asks
        # for file persistence (then it lands in ``workdir``, never the project's).
        env = {
            **os.environ,
            "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "true",
            "XDG_DATA_HOME": str(self.workdir / "xdg-data"),
            **self.env,
        }
        # The code: a project copy's own, else this checkout's.
        code = self.project_root if (self.project_root / "runtime").is_dir() else PROJECT_ROOT
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code), env.get("PYTHONPATH", "")) if p)
        env.update(
            LANGGRAPH_CLI_NO_ANALYTICS="1",
            LANGGRAPH_NO_VERSION_CHECK="true",
            LANGSMITH_TRACING="false",
            PYTHONUNBUFFERED="1",
            **{DEV_SERVER_MARKER: TEST_SESSION_ID},
        )
        command = self.command_line()
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            cwd=self.project_root if self.watch_project else self.workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited early:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"langgraph dev did not answer /ok on {self.url}:\n{self.log()}")

    async def astart(self, timeout: float = 60.0) -> DevServer:
        """``start`` in a worker thread: the in-process server's blocking-call
        detector (blockbuster) is active in the test process, and starting a
        subprocess and polling it block."""
        return await asyncio.to_thread(self.start, timeout)

    async def alog(self) -> str:
        return await asyncio.to_thread(self.log)

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Stop the process group; safe to call from an async test."""
        _off_loop(self._stop)

    def _stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        self.process = None

    def client(self, *, headers: Mapping[str, str] | None = None) -> LangGraphClient:
        http = httpx.AsyncClient(base_url=self.url, headers=dict(headers or {}), timeout=60)
        return LangGraphClient(http)

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
