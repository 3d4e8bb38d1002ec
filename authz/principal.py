"""Who is acting in a run, for authorization: ``Principal`` and ``build_principal_from_context``.

Why a separate object from the owner id: ownership answers "whose threads are
these", authorization answers "what may this caller do". Both come from the
same server-set source, the authenticated user LangGraph Server puts into the
run's config (``configurable.langgraph_auth_user``), which run-input hygiene
guarantees a caller cannot forge. Nothing here reads caller-supplied context
or configurable keys: roles and permissions come only from the JWT claims or
the API key entry the auth handler verified, and ``is_internal`` only from a
verified delegation token (remote subagent runs) or the in-process subagent
executor, which copies the parent's user object unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from auth.identity import make_safe_user_id, principal_of

__all__ = ["Principal", "build_principal_from_context"]

# id(server user object) -> (that object, its principal). The object is kept and
# compared by identity, so a reused id never returns another user's principal.
# The server builds one user object per request, so this saves the rebuild on
# every tool and model call of a run.
_MAX_CACHED = 1024
_cache: dict[tuple[int, bool], tuple[Any, Principal]] = {}


@dataclass(frozen=True)
class Principal:
    """The authenticated actor of one run."""

    user_id: str
    """The safe user id (``resolve_runtime_user_id``'s value)."""
    roles: tuple[str, ...] = ()
    permissions: tuple[str, ...] = ()
    is_internal: bool = False
    """True for delegated subagent runs (they inherit, never widen, the parent's grants)."""
    auth_mode: str | None = None


def _field(user: Any, key: str) -> Any:
    if isinstance(user, Mapping):
        return user.get(key)
    getter = getattr(user, "get", None)
    if callable(getter):
        try:
            return getter(key)
        except Exception:
            return None
    return getattr(user, key, None)


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list | tuple | set | frozenset):
        return ()
    return tuple(dict.fromkeys(str(item) for item in value if isinstance(item, str) and item))


def _configurable(source: Any) -> Mapping[str, Any]:
    config = source
    if not isinstance(config, Mapping):
        config = getattr(source, "config", None)
    if not isinstance(config, Mapping):
        try:
            from langgraph.config import get_config

            config = get_config()
        except RuntimeError:
            return {}
    configurable = config.get("configurable")
    return configurable if isinstance(configurable, Mapping) else {}


def _server_user(source: Any) -> Any:
    server_info = getattr(source, "server_info", None)
    user = getattr(server_info, "user", None)
    if user is not None:
        return user
    return _configurable(source).get("langgraph_auth_user")


def build_principal_from_context(source: Any, *, internal: bool = False) -> Principal:
    """The run's principal from a ``RunnableConfig`` or a ``Runtime``.

    A run without a server user (a direct ``create_agent`` invocation in a
    script or test) is the local ``default`` user with no roles: the
    configured ``default_role`` applies to it like to any user without roles.
    ``internal`` marks a principal built for a subagent by the host itself.
    """
    user = _server_user(source)
    if user is None:
        return _INTERNAL_LOCAL if internal else _LOCAL
    if user is not None:
        cached = _cache.get((id(user), internal))
        if cached is not None and cached[0] is user:
            return cached[1]
    principal = _build(user, internal)
    if user is not None:
        if len(_cache) >= _MAX_CACHED:
            _cache.clear()
        _cache[(id(user), internal)] = (user, principal)
    return principal


def _build(user: Any, internal: bool) -> Principal:
    owner = principal_of(user) if user is not None else None
    delegated = bool(_field(user, "delegated_subagent") or _field(user, "is_delegated_subagent"))
    return Principal(
        user_id=make_safe_user_id(owner),
        roles=_strings(_field(user, "roles")) if user is not None else (),
        permissions=_strings(_field(user, "permissions")) if user is not None else (),
        is_internal=internal or delegated,
        auth_mode=_field(user, "auth_mode") if user is not None else None,
    )


_LOCAL = _build(None, False)
_INTERNAL_LOCAL = _build(None, True)
