"""The ``env`` file of ``langgraph.json``, applied the way ``langgraph dev`` applies it.

``langgraph dev`` reads the file named by ``env`` (``.env``) with python-dotenv
and sets every entry in the server's environment **over** the shell's value,
except the variables the server owns (``DATABASE_URI``, ``REDIS_URI``,
``LANGGRAPH_*``, ...). Developer commands that must agree with a running
``make dev`` (``python -m auth mint-token``, ``scripts/dev.py``'s checks) use
this module, so they see the same secret and database as the server.
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from pathlib import Path

__all__ = ["apply_dev_env", "dev_env_values"]

_SERVER_OWNED = frozenset({"DATABASE_URI", "REDIS_URI", "MIGRATIONS_PATH", "N_JOBS_PER_WORKER"})
_SERVER_OWNED_PREFIXES = ("LANGGRAPH_", "LANGSERVE_")


def dev_env_values(config_file: Path) -> dict[str, str]:
    """The entries the server would take from ``config_file``'s ``env`` (file or mapping)."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    env = config.get("env") if isinstance(config, dict) else None
    if isinstance(env, dict):
        values = {str(k): str(v) for k, v in env.items()}
    elif isinstance(env, str) and env:
        from dotenv import dotenv_values

        path = Path(env)
        if not path.is_absolute():
            # langgraph dev opens it relative to its working directory; the
            # project directory (where langgraph.json is) is where make dev runs.
            path = config_file.resolve().parent / path
        if not path.is_file():
            return {}
        values = {k: v for k, v in dotenv_values(path).items() if v is not None}
    else:
        return {}
    return {
        key: value
        for key, value in values.items()
        if key not in _SERVER_OWNED and not key.startswith(_SERVER_OWNED_PREFIXES)
    }


def apply_dev_env(
    config_file: Path, environ: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """Set the ``env`` entries into ``environ`` (default ``os.environ``) over what is
    there, as ``langgraph dev`` does; return what was applied."""
    target = os.environ if environ is None else environ
    values = dev_env_values(config_file)
    target.update(values)
    return values
