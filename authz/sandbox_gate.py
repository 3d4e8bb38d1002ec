"""Sandbox authorization (``sandbox:execute``), checked before every sandbox acquisition."""

from __future__ import annotations

from typing import Any

from authz.principal import build_principal_from_context
from authz.provider import FailClosedAuthorizer
from sandbox.base import SandboxError

__all__ = ["SandboxAuthorizationError", "check_sandbox_authorization"]


class SandboxAuthorizationError(SandboxError, PermissionError):
    """The run's user may not use the sandbox (no ``sandbox:execute``)."""


async def check_sandbox_authorization(
    authorizer: FailClosedAuthorizer | None, runtime: Any
) -> None:
    """Raise ``SandboxAuthorizationError`` unless the run's principal may execute in a sandbox."""
    if authorizer is None:
        return
    principal = build_principal_from_context(runtime)
    decision = await authorizer.aauthorize(principal, "sandbox", "execute")
    if not decision.allowed:
        raise SandboxAuthorizationError(
            "SandboxAuthorizationError: this user may not use the sandbox "
            f"({decision.reason or 'missing permission sandbox:execute'}); "
            "no file or shell tool can run"
        )
