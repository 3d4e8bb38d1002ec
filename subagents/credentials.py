"""Delegation credentials for remote subagent runs (implemented in ``auth.delegation``).

Kept as the subagents package's entry point: the ``task`` tool mints a token
bound to the child thread it is about to create and sends it with
``delegation_header``. The token format, its claims and what it may do are
described in ``auth.delegation``.
"""

from __future__ import annotations

from auth.delegation import (
    DELEGATION_AUDIENCE,
    DELEGATION_ISSUER,
    DELEGATION_SCHEME,
    SECRET_ENV,
    DelegatedUser,
    DelegationTokenError,
    authenticate_delegation,
    delegation_header,
    mint_delegation_token,
    verify_delegation_token,
)

__all__ = [
    "DELEGATION_AUDIENCE",
    "DELEGATION_ISSUER",
    "DELEGATION_SCHEME",
    "SECRET_ENV",
    "DelegatedUser",
    "DelegationTokenError",
    "authenticate_delegation",
    "delegation_header",
    "mint_delegation_token",
    "verify_delegation_token",
]
