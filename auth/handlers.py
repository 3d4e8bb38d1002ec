"""The project's ``langgraph_sdk.Auth``, registered in ``langgraph.json``.

Authentication is in ``auth.authenticate``; this module holds authorization:

- threads (and the runs on them), crons: the owner is stamped on create
  (``metadata.owner``, always the caller: a forged owner is overwritten);
  read, search, update and delete are filtered to the owner, so another
  user's thread answers 404.
- assistants: the server's own assistants for the registered graphs
  (``metadata.created_by == "system"``) are visible to everyone and modifiable
  by no user; user-created ones belong to their creator. ``created_by`` can
  never be set by a caller.
- store: every namespace is forced under the caller's safe id.
- anything else: denied (the global default-deny handler).
- a subagent delegation token (``auth.delegation``): only its own child
  thread(s): create, run, read, cancel runs, search (``_delegated_threads``).
- creating a run also applies run-input hygiene (``auth.hygiene``) and the
  per-user cap on active runs (``auth.run_cap``, 429).

Every handler first resolves the caller (``auth.access.resolve_caller``): it refuses everything in
mode ``none`` outside ``langgraph dev``, applies the Studio policy to the
LangGraph Studio user, and refuses the anonymous ``/health`` caller.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from langgraph_sdk import Auth

from auth.access import (
    DELEGATION_KEY,
    OWNER_KEY,
    Caller,
    refuse_delegated,
    require_delegated_thread,
    resolve_caller,
)
from auth.authenticate import authenticate_request, load_auth_settings, log_startup_status
from auth.hygiene import RejectedInput, sanitize_run_kwargs, strip_reserved
from auth.run_cap import enforce_run_cap
from runtime.config import ConfigError, aget_settings
from runtime.models import resolve_model_name
from runtime.run_options import resolve_run_options

__all__ = ["OWNER_KEY", "SYSTEM_CREATOR", "auth"]


def _sanitized(kwargs: Any, *, user_id: str | None = None, stored: bool = False) -> list[str]:
    """Run-input hygiene; input refused whole answers 422 with the reason."""
    try:
        return sanitize_run_kwargs(kwargs, user_id=user_id, stored=stored)
    except RejectedInput as exc:
        raise Auth.exceptions.HTTPException(status_code=422, detail=str(exc)) from None


logger = logging.getLogger("deerflow.auth")

SYSTEM_CREATOR = "system"
# Metadata keys only the server writes.
MODEL_WARNING_KEY = "model_warning"
_PROTECTED_METADATA = (OWNER_KEY, "created_by", DELEGATION_KEY, MODEL_WARNING_KEY)

auth = Auth()

log_startup_status()


@auth.authenticate
async def authenticate(
    authorization: str | None,
    headers: dict[bytes, bytes],
    path: str,
    method: str,
) -> dict[str, Any]:
    return await authenticate_request(
        authorization=authorization, headers=headers, path=path, method=method
    )


def _metadata(value: MutableMapping[str, Any], key: str = "metadata") -> MutableMapping[str, Any]:
    """The value's metadata dict, created in place when absent."""
    metadata = value.get(key)
    if not isinstance(metadata, MutableMapping):
        metadata = {}
        value[key] = metadata
    return metadata


def _protect(metadata: Any) -> None:
    """Drop server-owned keys from caller metadata (no forged owner or system creator)."""
    if isinstance(metadata, MutableMapping):
        for key in _PROTECTED_METADATA:
            metadata.pop(key, None)


async def _note_model_warning(value: MutableMapping[str, Any], kwargs: Any) -> None:
    """An unknown ``model_name`` runs the default model: say so in the run's metadata
    (what ``runs.get`` returns), not only in the checkpoints."""
    if not isinstance(kwargs, MutableMapping):
        return
    config = kwargs.get("config")
    run_config: dict[str, Any] = dict(config) if isinstance(config, MutableMapping) else {}
    run_config["context"] = kwargs.get("context")
    options = resolve_run_options(run_config)  # type: ignore[arg-type]
    if not options.model_name:
        return
    try:
        warning = resolve_model_name(await aget_settings(), options.model_name).warning
    except ConfigError:
        return  # a broken config fails the run itself, with its own message
    if warning:
        _metadata(value)[MODEL_WARNING_KEY] = warning


def _stamp_owner(value: MutableMapping[str, Any], caller: Caller) -> None:
    metadata = _metadata(value)
    _protect(metadata)
    metadata[OWNER_KEY] = caller.principal


@auth.on
async def deny_unhandled(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Default deny: a resource or action without a handler below is refused."""
    logger.warning("denied unhandled %s.%s", ctx.resource, ctx.action)
    return False


@auth.on.threads
async def on_threads(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType | bool:
    """Threads and the runs on them: the owner only."""
    caller = await resolve_caller(ctx.user)
    action = ctx.action
    if caller.delegated:
        return _delegated_threads(caller, action, value)
    if action == "create":
        _stamp_owner(value, caller)
    elif action == "create_run":
        _stamp_owner(value, caller)
        _run_hygiene(value, caller)
        settings = await load_auth_settings()
        await enforce_run_cap(caller, settings.runs.max_active_per_user)
        await _note_model_warning(value, value.get("kwargs"))
    elif action == "update":
        _protect(value.get("metadata"))
    elif action not in ("read", "search", "delete"):
        return False
    return caller.owner_filter


def _run_hygiene(value: Any, caller: Caller) -> None:
    kwargs = value.get("kwargs")
    if isinstance(kwargs, MutableMapping):
        config = kwargs.get("config")
        if isinstance(config, MutableMapping):
            _protect(config.get("metadata"))
        removed = _sanitized(kwargs, user_id=caller.principal)
        if removed:
            logger.info("run input hygiene removed %s", ", ".join(sorted(removed)))


def _delegated_threads(caller: Caller, action: str, value: Any) -> Auth.types.FilterType:
    """A delegation token: create, run, read and cancel runs on its own child thread(s).

    Search sees only threads created with this very token; state writes,
    metadata patches, copies (a create of another id) and deletes answer 403.
    """
    thread_id = value.get("thread_id") if isinstance(value, MutableMapping) else None
    if action == "create":
        require_delegated_thread(caller, thread_id, "create threads")
        _stamp_owner(value, caller)
        _metadata(value)[DELEGATION_KEY] = caller.delegation_id
    elif action == "create_run":
        require_delegated_thread(caller, thread_id, "start runs")
        _stamp_owner(value, caller)
        _run_hygiene(value, caller)
    elif action == "read":
        require_delegated_thread(caller, thread_id, "read threads")
    elif action == "update" and value.get("action") == "interrupt":
        require_delegated_thread(caller, thread_id, "cancel runs")
    elif action == "search":
        return {**caller.owner_filter, DELEGATION_KEY: caller.delegation_id or ""}
    else:
        detail = {"update": "change thread state or metadata", "delete": "delete threads"}
        refuse_delegated(caller, detail.get(action, action))
    return caller.owner_filter


@auth.on.assistants
async def on_assistants(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType | bool:
    """System assistants: readable by all, modifiable by none. Others: their creator."""
    caller = await resolve_caller(ctx.user)
    action = ctx.action
    if action in ("read", "search"):
        visible: Any = {"$or": [caller.owner_filter, {"created_by": SYSTEM_CREATOR}]}
        return visible
    refuse_delegated(caller, "change assistants")
    if action == "create":
        _stamp_owner(value, caller)
    elif action == "update":
        _protect(value.get("metadata"))
    elif action != "delete":
        return False
    if action in ("create", "update"):
        config = value.get("config")
        if isinstance(config, MutableMapping):
            strip_reserved(config.get("configurable"))
            _protect(config.get("metadata"))
        strip_reserved(value.get("context"))
    return caller.owner_filter


@auth.on.crons
async def on_crons(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType | bool:
    """Crons: the owner only. Studio users cannot create them (see README)."""
    caller = await resolve_caller(ctx.user)
    refuse_delegated(caller, "use crons")
    action = ctx.action
    if action == "create":
        if caller.studio:
            raise Auth.exceptions.HTTPException(
                status_code=403,
                detail="LangGraph Studio cannot create crons; use an authenticated client",
            )
        payload = value.get("payload")
        if isinstance(payload, MutableMapping):
            config = payload.get("config")
            if isinstance(config, MutableMapping):
                _protect(config.get("metadata"))
            _protect(payload.get("metadata"))
            _sanitized(payload, stored=True)
        # After the payload: the server may share one dict for both metadata fields.
        _stamp_owner(value, caller)
    elif action == "update":
        _protect(value.get("metadata"))
        payload = value.get("payload")
        if isinstance(payload, MutableMapping):
            _sanitized(payload, stored=True)
    elif action not in ("read", "delete", "search"):
        return False
    return caller.owner_filter


@auth.on.store
async def on_store(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Force every namespace under ``(caller's safe id, ...)``, whatever was asked."""
    caller = await resolve_caller(ctx.user)
    refuse_delegated(caller, "use the store")
    root = caller.safe_id
    namespace = value.get("namespace")
    labels = tuple(namespace) if namespace else ()
    if not labels or labels[0] != root:
        labels = (root, *labels)
    value["namespace"] = labels
