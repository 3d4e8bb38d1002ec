"""The contract every sandbox provider implements.

Tools and guard middlewares only ever speak this interface, so they run
unchanged on the local provider (development) and the Kubernetes provider
(production). Paths are always *virtual* (``/mnt/user-data/...``,
``/mnt/skills``); each provider maps them onto its own storage and refuses
anything that escapes (``sandbox.paths.parse_virtual_path`` does the lexical
part for every provider). ``tests/sandbox/contract.py`` is the executable
version of this contract: a provider is done when it passes that suite.

Conventions every provider keeps:

- ``execute_command`` combines stdout and stderr into ``output`` (UTF-8,
  undecodable bytes replaced), caps it while streaming (head and tail kept,
  the middle replaced by a note, ``truncated=True``), kills the whole process
  tree on timeout (``timed_out=True``), and never passes environment variables
  whose names look like secrets (``sandbox.env``).
- ``read_file`` returns text (UTF-8 with replacement characters for invalid
  bytes); a binary file raises ``SandboxError`` naming it as binary. Line
  numbers are 1-based and inclusive.
- ``list_dir`` returns virtual paths; directories end with ``/``, symbolic
  links end with ``@`` and are never followed.
- Symbolic links are never followed by file operations: a link anywhere in
  a path raises ``SandboxPathError``.
- User-caused problems (missing file, bad path, invalid regex) raise
  ``SandboxError`` subclasses with a message a model can act on; a missing
  file or directory is ``SandboxNotFoundError`` (also a ``FileNotFoundError``).
"""

from __future__ import annotations

import abc
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.config import Settings

__all__ = [
    "CommandResult",
    "GrepMatch",
    "Sandbox",
    "SandboxError",
    "SandboxNotFoundError",
    "SandboxPathError",
    "SandboxProvider",
]


class SandboxError(Exception):
    """A sandbox operation failed for a reason the model can be told about."""


class SandboxPathError(SandboxError):
    """A path is outside the sandbox's virtual roots or escapes them."""


class SandboxNotFoundError(SandboxError, FileNotFoundError):
    """The file or directory does not exist (also a ``FileNotFoundError``)."""


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
    """One (user, thread)'s shell and filesystem.

    ``user_id`` / ``thread_id`` name the owner. Callers that find a sandbox by
    an id read from graph state (which a client can edit) check them before
    use, so a forged ``sandbox_id`` never reaches another user's sandbox; a
    provider that leaves them ``None`` is simply re-acquired on every call.
    """

    #: True when ``/mnt/user-data`` *is* the host thread directory (local
    #: provider). Otherwise presented outputs are copied to the host thread
    #: directory (through ``download_bytes``) so the HTTP app can serve them.
    shares_host_user_data: bool = False

    def __init__(
        self, sandbox_id: str, *, user_id: str | None = None, thread_id: str | None = None
    ) -> None:
        self.id = sandbox_id
        self.user_id = user_id
        self.thread_id = thread_id

    def belongs_to(self, user_id: str, thread_id: str) -> bool:
        return self.user_id == user_id and self.thread_id == thread_id

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

    async def is_file(self, path: str) -> bool:
        """Whether ``path`` is a regular file (not a link). Providers may do better."""
        parent, name = posixpath.split(path.rstrip("/"))
        if not name:
            return False
        try:
            entries = await self.list_dir(parent or "/", max_depth=1)
        except SandboxError:
            return False
        target = posixpath.join(parent, name)
        return target in entries


class SandboxProvider(abc.ABC):
    """Hands out sandboxes; chosen by config ``sandbox.use: module:Class``."""

    @classmethod
    def from_settings(cls, settings: Settings) -> SandboxProvider:
        """Build the provider from config. Must not do I/O (graph factories call it)."""
        return cls()

    @property
    def allows_commands(self) -> bool:
        """False when shell commands are switched off (the ``bash`` tool is then not offered)."""
        return True

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

    @property
    def in_use(self) -> int:
        """How many acquired sandboxes a run still holds (shutdown waits for zero)."""
        return 0

    async def delete_thread(self, thread_id: str, *, user_id: str) -> None:
        """The thread was deleted: drop what the provider keeps for it outside the data root.

        The thread's files under the data root are removed by the caller
        (``sandbox.thread_files``); a provider with its own per-thread
        resources (the Kubernetes pod and workspace volume) removes them here.
        """
        return None
