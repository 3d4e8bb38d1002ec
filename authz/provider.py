"""Authorization: may this principal use this tool, model or sandbox?

``AuthorizationProvider`` is the interface (custom ones are configured with
``authorization.use: module:Class``); ``RolePolicyProvider`` is the built-in
role policy from ``authorization.roles``. Permissions are
``<resource>:<name or action>`` strings with ``*`` wildcards: ``tool:bash``,
``tool:*``, ``model:gpt-4o``, ``model:*``, ``sandbox:execute``, or ``*``.

Decisions fail closed: ``FailClosedAuthorizer`` wraps every provider, so one
that raises (or returns something that is not a decision) denies, with the
reason logged. Nothing is allowed without a permission that grants it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from authz.principal import Principal

__all__ = [
    "AuthorizationDecision",
    "AuthorizationProvider",
    "FailClosedAuthorizer",
    "RolePolicyProvider",
    "permission_for",
    "permission_matches",
]

logger = logging.getLogger("deerflow.authz")


@dataclass(frozen=True)
class AuthorizationDecision:
    """One decision: ``allowed``, and the rule or reason behind it (never argument values)."""

    allowed: bool
    rule: str | None = None
    reason: str | None = None


@runtime_checkable
class AuthorizationProvider(Protocol):
    """Decides whether ``principal`` may perform ``action`` on ``resource`` named ``name``.

    ``resource`` is ``"tool"``, ``"model"`` or ``"sandbox"``; ``action`` is
    ``"use"`` for tools and models and ``"execute"`` for the sandbox. A provider
    may also define ``async def aauthorize(...)`` with the same signature; the
    async hooks call it instead of ``authorize`` (for providers that do I/O).
    """

    def authorize(
        self, principal: Principal, resource: str, action: str, name: str | None = None
    ) -> AuthorizationDecision: ...


def permission_for(resource: str, action: str, name: str | None) -> str:
    """The permission a request needs: ``tool:<name>``, ``model:<name>``, ``sandbox:execute``."""
    if resource in ("tool", "model") and name:
        return f"{resource}:{name}"
    return f"{resource}:{action}"


def permission_matches(granted: str, needed: str) -> bool:
    """``granted`` covers ``needed``: exact, ``*``, or ``<resource>:*``."""
    if granted in ("*", needed):
        return True
    resource, _, rest = granted.partition(":")
    return rest == "*" and needed.startswith(f"{resource}:")


class RolePolicyProvider:
    """The built-in role policy: a role grants the permissions listed for it.

    A principal's grants are the union of its roles' permissions and the
    permissions its token or API key entry carries. A principal with no roles
    gets ``default_role``; roles the policy does not define grant nothing.

    Args:
        roles: role name -> permission strings.
        default_role: the role of principals that have none (None: no grants).

    Example::

        RolePolicyProvider(roles={"intern": ["tool:read_file", "model:small"]},
                           default_role="intern")
    """

    def __init__(
        self, *, roles: Mapping[str, Sequence[str]], default_role: str | None = None
    ) -> None:
        if default_role is not None and default_role not in roles:
            raise ValueError(f"default_role {default_role!r} is not one of the roles")
        self._roles = {name: tuple(perms) for name, perms in roles.items()}
        self._default_role = default_role

    def grants(self, principal: Principal) -> tuple[str, ...]:
        """Every permission ``principal`` holds (roles' and its own), in order, deduped."""
        roles = principal.roles or ((self._default_role,) if self._default_role else ())
        granted: list[str] = []
        for role in roles:
            granted.extend(self._roles.get(role, ()))
        granted.extend(principal.permissions)
        return tuple(dict.fromkeys(granted))

    def effective_roles(self, principal: Principal) -> tuple[str, ...]:
        if principal.roles:
            return principal.roles
        return (self._default_role,) if self._default_role else ()

    def authorize(
        self, principal: Principal, resource: str, action: str, name: str | None = None
    ) -> AuthorizationDecision:
        needed = permission_for(resource, action, name)
        for granted in self.grants(principal):
            if permission_matches(granted, needed):
                return AuthorizationDecision(True, rule=granted)
        return AuthorizationDecision(False, rule=None, reason=f"missing permission {needed}")


class FailClosedAuthorizer:
    """Any provider, made fail-closed: an exception or a malformed answer denies (logged)."""

    def __init__(self, provider: Any) -> None:
        if not callable(getattr(provider, "authorize", None)):
            raise TypeError(f"{type(provider).__name__} has no authorize() method")
        self.provider = provider
        self._async = getattr(provider, "aauthorize", None)
        if self._async is not None and not inspect.iscoroutinefunction(self._async):
            self._async = None

    @property
    def name(self) -> str:
        return type(self.provider).__name__

    def _checked(self, decision: Any, needed: str) -> AuthorizationDecision:
        if isinstance(decision, AuthorizationDecision):
            return decision
        if isinstance(decision, bool):
            return AuthorizationDecision(decision, reason=None if decision else f"denied {needed}")
        logger.error("authorization provider %s returned %r; denying", self.name, decision)
        return AuthorizationDecision(False, reason="authorization provider error")

    def authorize(
        self, principal: Principal, resource: str, action: str, name: str | None = None
    ) -> AuthorizationDecision:
        needed = permission_for(resource, action, name)
        try:
            decision = self.provider.authorize(principal, resource, action, name)
        except Exception as exc:
            logger.error(
                "authorization provider %s failed for %s (%s); denying",
                self.name,
                needed,
                type(exc).__name__,
            )
            return AuthorizationDecision(False, reason="authorization provider error")
        return self._checked(decision, needed)

    async def aauthorize(
        self, principal: Principal, resource: str, action: str, name: str | None = None
    ) -> AuthorizationDecision:
        if self._async is None:
            return self.authorize(principal, resource, action, name)
        needed = permission_for(resource, action, name)
        try:
            decision = await self._async(principal, resource, action, name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error(
                "authorization provider %s failed for %s (%s); denying",
                self.name,
                needed,
                type(exc).__name__,
            )
            return AuthorizationDecision(False, reason="authorization provider error")
        return self._checked(decision, needed)

    def allowed_names(self, principal: Principal, resource: str, names: Iterable[str]) -> list[str]:
        """The subset of ``names`` this principal may use (Layer 1 filtering)."""
        return [n for n in names if self.authorize(principal, resource, "use", n).allowed]

    def grants(self, principal: Principal) -> tuple[str, ...] | None:
        """The permissions the provider reports for ``principal`` (None if it cannot say)."""
        grants = getattr(self.provider, "grants", None)
        if not callable(grants):
            return None
        try:
            return tuple(grants(principal))
        except Exception:
            return None

    def effective_roles(self, principal: Principal) -> tuple[str, ...]:
        roles = getattr(self.provider, "effective_roles", None)
        if callable(roles):
            try:
                return tuple(roles(principal))
            except Exception:
                return principal.roles
        return principal.roles
