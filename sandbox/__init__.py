"""The sandbox contract and its providers (local for development, Kubernetes for production)."""

from sandbox.base import (
    CommandResult,
    GrepMatch,
    Sandbox,
    SandboxError,
    SandboxNotFoundError,
    SandboxPathError,
    SandboxProvider,
)

__all__ = [
    "CommandResult",
    "GrepMatch",
    "Sandbox",
    "SandboxError",
    "SandboxNotFoundError",
    "SandboxPathError",
    "SandboxProvider",
]
