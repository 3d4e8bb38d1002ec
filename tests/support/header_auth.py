"""A test-only LangGraph auth: identity from an ``x-test-user`` header, owner-only threads.

Stands in for the project's real auth (its own issue) where a test needs two
users: every thread is stamped with its creator as ``owner`` and filtered to
that owner, so another user's thread answers 404 like it does in production.
Never use it outside tests: it trusts a header.
"""

from __future__ import annotations

import re
from typing import Any

from langgraph_sdk import Auth

__all__ = ["auth"]

auth = Auth()

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


@auth.authenticate
async def authenticate(headers: dict[bytes, bytes]) -> str:
    user = headers.get(b"x-test-user", b"").decode("ascii", errors="replace")
    if not _NAME.match(user):
        raise Auth.exceptions.HTTPException(status_code=401, detail="missing x-test-user")
    return user


@auth.on.threads
async def owner_only(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    filters = {"owner": ctx.user.identity}
    if isinstance(value, dict):
        metadata = value.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
            value["metadata"] = metadata
        metadata.update(filters)
    return filters
