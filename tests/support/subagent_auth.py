"""A small owner-isolating LangGraph auth for subagent tests (issue 4 owns the real one).

Users authenticate as ``Bearer user-<name>``; delegated subagent runs with the
token the ``task`` tool mints (``subagents.credentials``). Every resource is
stamped with its owner and filtered by it; the registered graphs' assistants
are readable by everyone.
"""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

from subagents.credentials import DelegationTokenError, authenticate_delegation

auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None) -> dict[str, Any]:
    try:
        delegated = authenticate_delegation(authorization)
    except DelegationTokenError as exc:
        raise Auth.exceptions.HTTPException(status_code=401, detail=str(exc)) from None
    if delegated is not None:
        return delegated.as_auth_result()
    if authorization and authorization.startswith("Bearer user-"):
        return {"identity": authorization.removeprefix("Bearer user-"), "permissions": []}
    raise Auth.exceptions.HTTPException(status_code=401, detail="unknown credentials")


@auth.on.assistants
async def assistants(ctx: Auth.types.AuthContext, value: Any) -> bool:
    return ctx.action in {"read", "search"}


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    owner = {"owner": ctx.user.identity}
    if isinstance(value, dict):
        metadata = value.get("metadata")
        if metadata is None:
            metadata = value["metadata"] = {}
        if isinstance(metadata, dict):
            metadata.update(owner)
    return owner
