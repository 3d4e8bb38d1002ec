"""Who the caller of one request is, after the fail-closed rules and the Studio policy.

Shared by the authorization handlers and the project's own HTTP routes, so
both apply the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langgraph_sdk import Auth
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection

from auth.authenticate import NONE_OUTSIDE_DEV, is_langgraph_dev, load_auth_settings
from auth.identity import DEFAULT_USER_ID, is_studio_user, make_safe_user_id, principal_of

__all__ = [
    "DELEGATION_KEY",
    "OWNER_KEY",
    "Caller",
    "refuse_delegated",
    "require_delegated_thread",
    "resolve_caller",
    "resolve_request_caller",
]

OWNER_KEY = "owner"
# Stamped on a thread created with a delegation token: the token's ``jti``.
DELEGATION_KEY = "delegation_id"


@dataclass(frozen=True)
class Caller:
    """The resolved caller of one request."""

    principal: str
    studio: bool
    delegated: bool = False
    """Authenticated by a subagent delegation token (runs and reads threads only)."""
    delegated_threads: frozenset[str] = field(default_factory=frozenset)
    """The thread ids a delegation token is bound to."""
    delegation_id: str | None = None
    """The delegation token's ``jti``."""

    @property
    def safe_id(self) -> str:
        return make_safe_user_id(self.principal)

    @property
    def owner_filter(self) -> dict[str, str]:
        return {OWNER_KEY: self.principal}


def _forbidden(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=403, detail=detail)


def _get(user: Any, key: str) -> Any:
    getter = getattr(user, "get", None)
    if callable(getter):
        try:
            return getter(key)
        except Exception:
            return None
    return getattr(user, key, None)


async def resolve_caller(user: Any) -> Caller:
    """Apply the fail-closed rules and the Studio policy to an authenticated user."""
    settings = await load_auth_settings()
    config = settings.auth
    if config.effective_mode == "none" and not is_langgraph_dev():
        raise _forbidden(NONE_OUTSIDE_DEV)
    if _get(user, "auth_mode") == "anonymous":
        raise Auth.exceptions.HTTPException(status_code=401, detail="authentication required")
    if is_studio_user(user):
        policy = config.studio_policy
        if policy == "deny":
            raise _forbidden(
                f"LangGraph Studio access is disabled (auth.studio: deny, auth mode "
                f"{config.effective_mode}); see the README, section Auth"
            )
        if not is_langgraph_dev() and not bool(_get(user, "is_authenticated")):
            raise _forbidden("unauthenticated Studio access is only allowed under langgraph dev")
        principal = principal_of(user, studio_policy=policy)
        return Caller(principal=principal or DEFAULT_USER_ID, studio=True)
    principal = principal_of(user)
    if not principal:
        raise Auth.exceptions.HTTPException(status_code=401, detail="authentication required")
    if config.effective_mode == "none":
        principal = DEFAULT_USER_ID
    delegated = bool(_get(user, "delegated_subagent"))
    threads = _get(user, "delegated_threads") if delegated else None
    jti = _get(user, "delegation_id") if delegated else None
    return Caller(
        principal=principal,
        studio=False,
        delegated=delegated,
        delegated_threads=frozenset(str(t) for t in threads or () if t),
        delegation_id=str(jti) if jti else None,
    )


def refuse_delegated(caller: Caller, what: str) -> None:
    """A delegation token only starts, follows and reads subagent runs.

    It is a bearer credential that leaves the process in remote mode, so it
    never grants the user's store, crons, assistants or deletions.
    """
    if caller.delegated:
        raise _forbidden(f"a subagent delegation token cannot {what}")


def require_delegated_thread(caller: Caller, thread_id: Any, what: str) -> None:
    """A delegation token acts only on the child thread(s) it was minted for."""
    if not caller.delegated:
        return
    if thread_id is None or str(thread_id).lower() not in caller.delegated_threads:
        raise _forbidden(f"a subagent delegation token cannot {what} outside its own thread")


async def resolve_request_caller(connection: HTTPConnection) -> Caller:
    """The caller of a request to the project's own routes (``app/``).

    Those routes sit behind the same authentication
    (``http.enable_custom_route_auth``); this applies the same caller rules
    and raises Starlette's ``HTTPException`` (401/403) when they refuse.
    Use ``caller.safe_id`` for anything stored per user.
    """
    user = connection.scope.get("user")
    if user is None:
        raise HTTPException(status_code=401, detail="authentication required")
    try:
        return await resolve_caller(user)
    except Auth.exceptions.HTTPException as exc:
        raise HTTPException(status_code=exc.status_code, detail=exc.detail) from None
