"""A test tool that reports who the run thinks its user is, and what it received.

It returns (as its ToolMessage, i.e. into the thread's state) the resolved
safe user id, the keys of the runtime context and configurable it sees, and
the ``additional_kwargs`` of the human messages; and it writes the same report
to ``<data root>/users/<safe id>/threads/<thread>/user-data/outputs/auth_probe.json``.
Tests use it to check that the auth layer's rewrites really reach the graph.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.tools import tool

from auth.identity import principal_of, resolve_runtime_user_id
from runtime.config import get_settings
from runtime.paths import thread_paths

__all__ = ["PROBE_FILE", "auth_probe"]

PROBE_FILE = "auth_probe.json"


def _keys(mapping: Any) -> list[str]:
    return sorted(str(key) for key in mapping) if isinstance(mapping, Mapping) else []


def _write(path: Any, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@tool
async def auth_probe(runtime: ToolRuntime[Any, Any]) -> str:
    """Report the run's user and inputs (a test tool)."""
    user_id = resolve_runtime_user_id(runtime)
    configurable = runtime.config.get("configurable") or {}
    context = runtime.context if isinstance(runtime.context, Mapping) else {}
    server_user = getattr(runtime.server_info, "user", None)
    messages = runtime.state.get("messages", []) if isinstance(runtime.state, Mapping) else []
    report = {
        "user_id": user_id,
        "server_user": principal_of(server_user),
        "context_keys": _keys(context),
        "context_user_id": context.get("user_id"),
        "configurable_keys": _keys(configurable),
        "configurable_user_id": configurable.get("user_id"),
        "configurable_thread_id": configurable.get("thread_id"),
        "auth_user_id": configurable.get("langgraph_auth_user_id"),
        "human_additional_kwargs": [
            dict(message.additional_kwargs) for message in messages if message.type == "human"
        ],
    }
    text = json.dumps(report, sort_keys=True, default=str)
    thread_id = str(configurable.get("thread_id") or "no-thread")
    paths = thread_paths(get_settings().data_root_path(), user_id, thread_id)
    await asyncio.to_thread(_write, paths.outputs / PROBE_FILE, text)
    return text
