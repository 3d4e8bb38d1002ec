"""Fixtures shared by the whole suite.

- ``use_config``: point the process at a config file (and forget the cached one).
- ``lg_server`` / ``lg_client``: the in-process LangGraph Server, once per session.
- ``dev_server``: start ``langgraph dev`` as a subprocess (the black-box path).
- ``postgres_uri``: a fresh database on the real local PostgreSQL per session.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.config import builtin_config, reset_settings_cache
from tests.support.postgres import fresh_database, postgres_available
from tests.support.server import DevServer, asgi_client, in_process_server, reap_dev_servers

# Keep the suite off the network and away from the developer's own config.
os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGGRAPH_CLI_NO_ANALYTICS", "1")
os.environ.setdefault("LANGGRAPH_NO_VERSION_CHECK", "true")


@pytest.fixture(scope="session", autouse=True)
def _in_memory_persistence() -> None:
    """Servers in the suite use the in-memory checkpointer unless a test asks for Postgres
    (session-scoped, so it runs before the session's in-process server starts)."""
    for key in ("DEERFLOW_POSTGRES_URI", "DEERFLOW_POSTGRES_SCHEMA", "DEERFLOW_POSTGRES_SETUP"):
        os.environ.pop(key, None)


@pytest.fixture(scope="session")
def _builtin_config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in defaults as a file: tests never read the developer's config.yaml."""
    path = tmp_path_factory.mktemp("config") / "builtin.yaml"
    path.write_text(yaml.safe_dump(builtin_config(), sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _isolated_settings(
    tmp_path_factory: pytest.TempPathFactory, _builtin_config_file: Path
) -> Iterator[None]:
    """Every test starts from the built-in defaults, with data under a temp dir."""
    saved = {k: os.environ.get(k) for k in ("DEERFLOW_CONFIG", "DEERFLOW_DATA_ROOT")}
    os.environ["DEERFLOW_CONFIG"] = str(_builtin_config_file)
    os.environ["DEERFLOW_DATA_ROOT"] = str(tmp_path_factory.mktemp("data"))
    reset_settings_cache()
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    reset_settings_cache()


@pytest.fixture
def use_config() -> Callable[[Path], Path]:
    """Make ``path`` the process's config (graphs served in-process pick it up)."""

    def apply(path: Path) -> Path:
        os.environ["DEERFLOW_CONFIG"] = str(path)
        os.environ.pop("DEERFLOW_DATA_ROOT", None)
        reset_settings_cache()
        return path

    return apply


@pytest.fixture(scope="session")
async def lg_server() -> AsyncIterator[Any]:
    """The project's LangGraph Server, in-process, registered from langgraph.json."""
    async with in_process_server() as app:
        yield app


@pytest.fixture
def lg_client(lg_server: Any) -> Callable[..., Any]:
    """Factory: ``lg_client(headers={...})`` -> a ``langgraph_sdk`` client over ASGI."""

    def make(headers: Mapping[str, str] | None = None) -> Any:
        return asgi_client(lg_server, headers=headers)

    return make


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[Callable[..., DevServer]]:
    """Factory: ``dev_server(env={...}, args=[...])`` starts ``langgraph dev``; stopped at teardown.

    Hermetic: the servers of one test share a working directory under
    ``tmp_path`` (their ``.langgraph_api`` and default data root), so a restart
    finds the first server's threads; the developer's ``.env`` is never loaded.
    Keyword options (``reload``, ``watch_project``, ``command``) go to ``DevServer``.

    Safe in async tests (it starts in a worker thread when a loop is running: the
    in-process server's blocking-call detector covers the whole test process).
    Read the log from async tests with ``await server.alog()``.
    """
    started: list[DevServer] = []

    def start(
        env: Mapping[str, str] | None = None, args: Sequence[str] = (), **options: Any
    ) -> DevServer:
        options.setdefault("workdir", tmp_path / "langgraph-dev-home")
        server = DevServer(
            tmp_path / f"langgraph-dev-{len(started)}.log", env=env, args=args, **options
        )
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def _reap_leaked_dev_servers() -> Iterator[None]:
    """No `langgraph dev` outlives the session, even one whose start failed."""
    yield
    reap_dev_servers()


@pytest.fixture(scope="session")
def postgres_uri() -> Iterator[str]:
    """A fresh database for this test session (dropped at the end)."""
    reason = postgres_available()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set, so this is an error, not a skip)")
        pytest.skip(reason)
    with fresh_database() as uri:
        yield uri
