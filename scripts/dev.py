"""``make dev``: check what would make ``langgraph dev`` fail or mislead, then run it.

``langgraph dev`` on its own silently moves to a random port when the requested
one is busy (every example then reaches the other process), and with reload on a
start that fails (an unreachable database) leaves the reloader running without
anything listening. This launcher:

1. refuses a busy port at once, naming it and how to pick another (``PORT=...``);
2. loads the config as the server will (``.env`` included, with ``langgraph dev``'s
   precedence) and, when a Postgres URI is set, connects once: a bad config or an
   unreachable database exits non-zero with the cause within seconds;
3. runs ``langgraph dev`` (reload on, as always) and watches its first start: a
   failed start or a port swap stops it and exits non-zero instead of hanging.

Usage: ``python scripts/dev.py --host 127.0.0.1 --port 2024 [-- <langgraph dev flags>]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Printed by the server (uvicorn / langgraph_api) when its first start fails.
_FAILED_START = ("Application startup failed", "Error loading ASGI app")
_PORT_SWAPPED = "is already in use, using port"


def fail(message: str, code: int = 1) -> int:
    sys.stderr.write(f"make dev: {message}\n")
    sys.stderr.flush()
    return code


def port_in_use(host: str, port: int) -> bool:
    # The same test langgraph dev uses before it swaps ports.
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _config_file(extra: list[str]) -> Path:
    for index, arg in enumerate(extra):
        if arg == "--config" and index + 1 < len(extra):
            return Path(extra[index + 1])
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1])
    return Path("langgraph.json")


def preflight(config_file: Path) -> str | None:
    """The first reason the server would fail to start, or None."""
    sys.path.insert(0, str(PROJECT_ROOT))
    from runtime.config import ConfigError, load_settings
    from runtime.dev_env import apply_dev_env

    apply_dev_env(config_file)
    from runtime.postgres import build_conninfo, describe_target

    try:
        settings = load_settings()
    except ConfigError as exc:
        return str(exc)
    root = settings.data_root_path().resolve()
    cwd = Path.cwd().resolve()
    if root == cwd or cwd in root.parents:
        sys.stderr.write(
            f"make dev: warning: data_root {root} is inside {cwd}, which langgraph dev "
            "watches: a .py file the agent writes there reloads the server and "
            "cancels the run. Unset DEERFLOW_DATA_ROOT / data_root to use the default.\n"
        )
    if settings.database.uri:
        import psycopg

        conninfo = build_conninfo(settings.database)
        try:
            with psycopg.connect(conninfo, connect_timeout=5) as conn:
                conn.execute("select 1")
        except Exception as exc:
            detail = " ".join(str(exc).split()) or type(exc).__name__
            return (
                f"cannot reach the database at {describe_target(conninfo)}: {detail}\n"
                "  Start PostgreSQL, fix DEERFLOW_POSTGRES_URI (or database.uri), or unset "
                "it to use the embedded default."
            )
    return None


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ok", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def run(host: str, port: int, extra: list[str], *, checks: bool) -> int:
    if port_in_use(host, port):
        return fail(
            f"port {port} on {host} is already in use (another `make dev`?).\n"
            f"  Stop that server, or pick another port: PORT={port + 1} make dev",
            2,
        )
    if checks:
        reason = preflight(_config_file(extra))
        if reason:
            return fail(reason)

    command = [
        sys.executable,
        "-m",
        "langgraph_cli",
        "dev",
        "--host",
        host,
        "--port",
        str(port),
        "--no-browser",
        *extra,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, bufsize=0
    )
    url = f"http://{host}:{port}"
    ready = threading.Event()

    def watch_ready() -> None:
        while child.poll() is None and not ready.is_set():
            if _answers(url):
                ready.set()
                return
            time.sleep(0.2)

    threading.Thread(target=watch_ready, daemon=True).start()
    # Ctrl-C reaches the whole foreground group; SIGTERM to us is passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())

    problem: str | None = None
    assert child.stdout is not None
    for raw in iter(child.stdout.readline, b""):
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        if ready.is_set() or problem:
            continue
        line = raw.decode("utf-8", "replace")
        if _PORT_SWAPPED in line:
            problem = (
                f"port {port} was taken while the server started.\n"
                f"  Pick another port: PORT={port + 1} make dev"
            )
        elif any(marker in line for marker in _FAILED_START):
            problem = "the server failed to start (see the error above)"
        if problem:
            # Let the traceback finish printing, then stop the reloader.
            threading.Timer(1.0, child.terminate).start()
    code = child.wait()
    if problem:
        return fail(problem)
    return code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args:
        split = args.index("--")
        args, extra = args[:split], args[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=2024)
    parser.add_argument(
        "--skip-checks",
        action="store_true",
        help="skip the config and database checks (the port is always checked)",
    )
    options = parser.parse_args(args)
    return run(options.host, options.port, extra, checks=not options.skip_checks)


if __name__ == "__main__":
    sys.exit(main())
