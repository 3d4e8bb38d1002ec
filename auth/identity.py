"""Who a run belongs to: ``resolve_runtime_user_id`` and its config-time twin.

Every consumer that touches per-user data (thread directories, memory,
sandboxes) must use these functions, never its own lookup, so that one user's
data can never be addressed under another user's id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from langchain_core.runnables import RunnableConfig

__all__ = [
    "DEFAULT_USER_ID",
    "current_request_user_id",
    "make_safe_user_id",
    "resolve_config_user_id",
    "resolve_runtime_user_id",
]

DEFAULT_USER_ID = "default"

# Set by server-side request handling when no LangGraph auth user is attached.
current_request_user_id: ContextVar[str | None] = ContextVar(
    "deerflow_request_user_id", default=None
)

_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def make_safe_user_id(raw: Any) -> str:
    """A filesystem-safe id: ``[A-Za-z0-9_-]`` only, never empty, never ``..``.

    Ids that are already safe pass through unchanged. Others have unsafe
    characters replaced and a short hash of the original appended, so two
    different raw ids never collapse onto the same directory.
    """
    text = "" if raw is None else str(raw)
    if _SAFE.match(text):
        return text
    if not text:
        return DEFAULT_USER_ID
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    cleaned = _UNSAFE_CHARS.sub("_", text)[:48].strip("_") or "user"
    return f"{cleaned}-{digest}"


def _identity_of(user: Any) -> str | None:
    if user is None:
        return None
    if isinstance(user, str):
        return user or None
    identity = getattr(user, "identity", None)
    if identity is None and isinstance(user, Mapping):
        identity = user.get("identity")
    if identity is None:
        return None
    return str(identity) or None


def _from_configurable(configurable: Mapping[str, Any]) -> str | None:
    user_id = configurable.get("langgraph_auth_user_id")
    if user_id:
        return str(user_id)
    return _identity_of(configurable.get("langgraph_auth_user"))


def resolve_runtime_user_id(runtime: Any) -> str:
    """The safe id of the user a run executes for.

    Order: server auth identity (``runtime.server_info.user``), the configurable
    ``langgraph_auth_user_id`` / ``langgraph_auth_user``, a server-set
    ``user_id`` in the runtime context, the request ContextVar, then
    ``"default"``.
    """
    server_info = getattr(runtime, "server_info", None)
    found = _identity_of(getattr(server_info, "user", None))
    if found is None:
        found = _configurable_from_runtime(runtime)
    if found is None:
        context = getattr(runtime, "context", None)
        value = None
        if isinstance(context, Mapping):
            value = context.get("user_id")
        elif context is not None:
            value = getattr(context, "user_id", None)
        found = str(value) if value else None
    if found is None:
        found = current_request_user_id.get()
    return make_safe_user_id(found or DEFAULT_USER_ID)


def _configurable_from_runtime(runtime: Any) -> str | None:
    config = getattr(runtime, "config", None)
    if isinstance(config, Mapping):
        found = _from_configurable(config.get("configurable") or {})
        if found:
            return found
    try:
        from langgraph.config import get_config

        current = get_config()
    except RuntimeError:
        return None
    return _from_configurable(current.get("configurable") or {})


def resolve_config_user_id(config: RunnableConfig | None) -> str:
    """Config-time twin for graph factories, which see a ``RunnableConfig``."""
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    found = _from_configurable(configurable)
    if found is None:
        context = (config or {}).get("context")  # type: ignore[typeddict-item]
        if isinstance(context, Mapping) and context.get("user_id"):
            found = str(context["user_id"])
    if found is None:
        found = current_request_user_id.get()
    return make_safe_user_id(found or DEFAULT_USER_ID)
