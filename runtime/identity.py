"""Who a run belongs to: ``resolve_runtime_user_id`` and its config-time twin.

Every consumer that touches per-user data (thread directories, memory,
sandboxes, store namespaces) must use these functions, never its own lookup,
so that one user's data can never be addressed under another user's id.

Two layers:

- ``principal_of(user)``: the *owner* string of a server user, exactly as the
  authorization handlers stamp it into ``metadata.owner``. Our own users are
  their identity; the LangGraph Studio user is ``"default"`` (the local user)
  under Studio policy ``local`` (mode ``none``) and ``"studio:<identity>"``
  otherwise, a prefix no token or API key may claim.
- ``make_safe_user_id(raw)``: the filesystem- and namespace-safe form of a
  principal. It is injective: two different principals never share a safe id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from langchain_core.runnables import RunnableConfig

__all__ = [
    "DEFAULT_USER_ID",
    "RESERVED_IDENTITIES",
    "STUDIO_PREFIX",
    "current_request_user_id",
    "is_reserved_identity",
    "is_studio_user",
    "make_safe_user_id",
    "principal_of",
    "resolve_config_user_id",
    "resolve_runtime_user_id",
    "use_studio_policy_source",
    "user_store_namespace",
]

DEFAULT_USER_ID = "default"
STUDIO_PREFIX = "studio:"

# Set by server-side request handling when no LangGraph auth user is attached.
current_request_user_id: ContextVar[str | None] = ContextVar(
    "deerflow_request_user_id", default=None
)

_SAFE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
# The shape of a hashed id; no authenticated identity may have it.
_HASHED_SHAPE = re.compile(r".*--[0-9a-f]{32}")
RESERVED_IDENTITIES = frozenset({DEFAULT_USER_ID})


def make_safe_user_id(raw: Any) -> str:
    """A safe id: only ``[A-Za-z0-9_-]``, never empty, never ``.``/``..``.

    Ids that are already safe (1-64 of those characters) pass through
    unchanged, so the function is idempotent. Anything else has runs of unsafe
    characters replaced by ``_`` and ``--`` plus 32 hex digits (128 bits) of the
    original's SHA-256 appended. The mapping is injective over the identities
    the auth layer accepts, because ``is_reserved_identity`` refuses plain ids
    of that hashed shape: nobody can claim ``"a_b--<hash of 'a/b'>"``.
    """
    text = "" if raw is None else str(raw)
    if not text:
        return DEFAULT_USER_ID
    if _SAFE.fullmatch(text):
        return text
    # 128 bits: an identity chosen at the IdP cannot be searched into a collision.
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    cleaned = _UNSAFE_CHARS.sub("_", text)[:28].strip("_") or "user"
    return f"{cleaned}--{digest}"


def is_reserved_identity(identity: str) -> bool:
    """True for identities only the server assigns; tokens and API keys may not claim them.

    Reserved: ``"default"`` (the local user of mode ``none`` and the fallback
    bucket), anything starting with ``"studio:"`` (Studio users), and plain ids
    shaped like a hashed safe id (``...--<32 hex>``), which keeps
    ``make_safe_user_id`` injective.
    """
    return (
        identity in RESERVED_IDENTITIES
        or identity.startswith(STUDIO_PREFIX)
        or (_SAFE.fullmatch(identity) is not None and _HASHED_SHAPE.fullmatch(identity) is not None)
    )


def is_studio_user(user: Any) -> bool:
    """True for the LangGraph Studio user (live object or its serialized dict)."""
    if user is None or isinstance(user, str):
        return False
    from langgraph_sdk.auth.types import StudioUser

    if isinstance(user, StudioUser):
        return True
    if isinstance(user, Mapping):
        return user.get("kind") == "StudioUser"
    getter = getattr(user, "get", None)
    if callable(getter):
        try:
            return getter("kind") == "StudioUser"
        except Exception:
            return False
    return False


def _raw_identity(user: Any) -> str | None:
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


# Where the configured Studio policy comes from. This module is a leaf (the
# settings import it), so the settings module registers its reader here when it
# is imported; until then the Studio user is never the local user.
def _deny_studio() -> str:
    return "deny"


_studio_policy_source: Callable[[], str] = _deny_studio


def use_studio_policy_source(source: Callable[[], str]) -> None:
    """Register where ``principal_of`` reads the configured Studio policy."""
    global _studio_policy_source
    _studio_policy_source = source


def _configured_studio_policy() -> str:
    return _studio_policy_source()


def principal_of(user: Any, *, studio_policy: str | None = None) -> str | None:
    """The owner string of a server user (``None`` when it has no identity).

    The Studio user is the local user ``"default"`` under Studio policy
    ``local`` (mode ``none``) and ``"studio:<identity>"`` otherwise.
    ``studio_policy`` defaults to the cached settings' policy (read only for
    the Studio user).
    """
    identity = _raw_identity(user)
    if identity is None:
        return None
    if is_studio_user(user):
        if (studio_policy or _configured_studio_policy()) == "local":
            return DEFAULT_USER_ID
        return f"{STUDIO_PREFIX}{identity}"
    return identity


def _from_configurable(configurable: Mapping[str, Any]) -> str | None:
    found = principal_of(configurable.get("langgraph_auth_user"))
    if found:
        return found
    user_id = configurable.get("langgraph_auth_user_id")
    return str(user_id) if user_id else None


def resolve_runtime_user_id(runtime: Any) -> str:
    """The safe id of the user a run executes for.

    Order: server auth identity (``runtime.server_info.user``), the configurable
    ``langgraph_auth_user`` / ``langgraph_auth_user_id``, a server-set
    ``user_id`` in the runtime context (the auth layer strips caller-supplied
    ones and sets its own), the request ContextVar, then ``"default"``.
    """
    server_info = getattr(runtime, "server_info", None)
    found = principal_of(getattr(server_info, "user", None))
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
    """Config-time twin for graph factories, which see a ``RunnableConfig``.

    Order: configurable ``langgraph_auth_user`` / ``langgraph_auth_user_id``,
    the server-set ``user_id`` (in ``context`` when the config carries one,
    else the configurable mirror the auth layer wrote), the request
    ContextVar, then ``"default"``.
    """
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    found = _from_configurable(configurable)
    if found is None:
        context = (config or {}).get("context")  # type: ignore[typeddict-item]
        if isinstance(context, Mapping) and context.get("user_id"):
            found = str(context["user_id"])
        elif configurable.get("user_id"):
            found = str(configurable["user_id"])
    if found is None:
        found = current_request_user_id.get()
    return make_safe_user_id(found or DEFAULT_USER_ID)


def user_store_namespace(user_id: str, *labels: str) -> tuple[str, ...]:
    """The store namespace of a user's items: ``(safe user id, *labels)``.

    The auth layer forces every store API call under this root, so graph code
    that writes ``user_store_namespace(resolve_runtime_user_id(runtime), ...)``
    and the user's API calls see the same items.
    """
    return (make_safe_user_id(user_id), *labels)
