"""The contract every sandbox provider implements.

Tools and guard middlewares only ever speak this interface, so they run
unchanged on the local provider (development) and the Kubernetes provider
(production). Paths are always *virtual* (``/mnt/user-data/...``,
``/mnt/skills``); each provider maps them onto its own storage.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "CommandResult",
    "GrepMatch",
    "Sandbox",
    "SandboxError",
    "SandboxPathError",
    "SandboxProvider",
]


class SandboxError(Exception):
    """A sandbox operation failed for a reason the model can be told about."""


class SandboxPathError(SandboxError):
    """A path is outside the sandbox's virtual roots or escapes them."""


@dataclass(frozen=True)
class CommandResult:
    output: str
    exit_code: int
    timed_out: bool = False
    truncated: bool = False


@dataclass(frozen=True)
class GrepMatch:
    path: str
    line_number: int
    line: str


class Sandbox(abc.ABC):
    """One (user, thread)'s shell and filesystem."""

    def __init__(self, sandbox_id: str) -> None:
        self.id = sandbox_id

    @abc.abstractmethod
    async def execute_command(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult: ...

    @abc.abstractmethod
    async def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str: ...

    @abc.abstractmethod
    async def write_file(self, path: str, content: str, append: bool = False) -> None: ...

    @abc.abstractmethod
    async def list_dir(self, path: str, max_depth: int = 2) -> list[str]: ...

    @abc.abstractmethod
    async def glob(self, pattern: str, path: str) -> list[str]: ...

    @abc.abstractmethod
    async def grep(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        max_results: int = 100,
    ) -> list[GrepMatch]: ...

    @abc.abstractmethod
    async def upload_bytes(self, path: str, data: bytes) -> None: ...

    @abc.abstractmethod
    async def download_bytes(self, path: str) -> bytes: ...


class SandboxProvider(abc.ABC):
    """Hands out sandboxes; chosen by config ``sandbox.use: module:Class``."""

    @abc.abstractmethod
    async def acquire(self, thread_id: str, *, user_id: str) -> str:
        """Return the id of the (user, thread)'s sandbox, creating it if needed."""

    @abc.abstractmethod
    def get(self, sandbox_id: str) -> Sandbox | None:
        """In-memory lookup of an acquired sandbox; never does I/O."""

    @abc.abstractmethod
    async def release(self, sandbox_id: str) -> None:
        """The run is done with it (it may be kept warm or reaped later)."""

    @abc.abstractmethod
    async def reset(self) -> None:
        """Forget every sandbox (tests, shutdown)."""
