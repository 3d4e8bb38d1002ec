"""The local sandbox provider: host subprocesses and host directories.

**This is not an isolation boundary.** Commands run on the server host, as the
server's user, with the thread's workspace as working directory. Virtual paths
in a command are rewritten to host paths and host paths in its output back to
virtual ones, secret-looking environment variables are withheld, and file
tools refuse escapes and never follow links, but a command can still read or
change anything the server's user can. Use it for development; production
uses the Kubernetes provider. ``sandbox.allow_host_bash: false`` switches
commands off (file tools keep working).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import shutil
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from auth.identity import make_safe_user_id
from runtime.paths import (
    VIRTUAL_OUTPUTS,
    VIRTUAL_SKILLS,
    VIRTUAL_UPLOADS,
    VIRTUAL_USER_DATA,
    VIRTUAL_WORKSPACE,
    ThreadPaths,
    default_data_root,
    thread_paths,
)
from sandbox import _hostfs
from sandbox.base import (
    CommandResult,
    GrepMatch,
    Sandbox,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
)
from sandbox.env import filter_env
from sandbox.paths import (
    VirtualPath,
    host_to_virtual,
    parse_virtual_path,
    virtual_to_host_in_command,
)

if TYPE_CHECKING:
    from runtime.config import Settings

__all__ = ["NOT_ISOLATED_WARNING", "LocalSandbox", "LocalSandboxProvider"]

logger = logging.getLogger(__name__)

NOT_ISOLATED_WARNING = (
    "LocalSandboxProvider runs agent commands on this host as the server's user; "
    "it is NOT an isolation boundary. Use it for development only "
    "(set sandbox.allow_host_bash: false to switch commands off)."
)

MAX_LIST_ENTRIES = 1000
MAX_GLOB_RESULTS = 1000
MAX_GREP_RESULTS = 1000
DEFAULT_MAX_DOWNLOAD_BYTES = 100 * 1024 * 1024
# After the shell exits, how long to keep reading output that background
# children still write to the inherited pipe.
_DRAIN_GRACE_SECONDS = 2.0
_SHELL_UNSAFE = re.compile(r"[^A-Za-z0-9_./@%+=:,-]")


class _OutputCapture:
    """Keeps the head and the tail of a stream, counting what it drops."""

    def __init__(self, limit: int) -> None:
        self.tail_limit = limit // 2
        self.head_limit = limit - self.tail_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data or self.tail_limit == 0:
            return
        if len(data) >= self.tail_limit:
            self.tail = bytearray(data[-self.tail_limit :])
            return
        self.tail += data
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            del self.tail[:excess]

    def render(self) -> tuple[str, bool]:
        omitted = self.total - len(self.head) - len(self.tail)
        head = bytes(self.head).decode("utf-8", errors="replace")
        tail = bytes(self.tail).decode("utf-8", errors="replace")
        if omitted <= 0:
            return head + tail, False
        note = (
            f"\n\n[... output truncated: {omitted} of {self.total} bytes omitted; "
            "redirect large output to a file and read parts of it ...]\n\n"
        )
        return head + note + tail, True


class _CommandProtocol(asyncio.SubprocessProtocol):
    def __init__(self, capture: _OutputCapture, loop: asyncio.AbstractEventLoop) -> None:
        self.capture = capture
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.capture.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1 and not self.output_closed.done():
            self.output_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _kill_group(pid: int | None) -> None:
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class LocalSandbox(Sandbox):
    """A (user, thread)'s directories on the host, and host subprocesses."""

    shares_host_user_data = True

    def __init__(
        self,
        sandbox_id: str,
        *,
        user_id: str,
        thread_id: str,
        paths: ThreadPaths,
        data_root: Path,
        skills_dir: Path | None,
        shell: str,
        host_aliases: Mapping[str, str],
        allow_commands: bool,
        command_timeout: float,
        max_output_bytes: int,
        max_read_bytes: int,
        max_download_bytes: int,
        secret_env_patterns: Iterable[str],
    ) -> None:
        super().__init__(sandbox_id, user_id=user_id, thread_id=thread_id)
        self.paths = paths
        self._shell = shell
        self._allow_commands = allow_commands
        self._timeout = command_timeout
        self._max_output = max_output_bytes
        self._max_read = max_read_bytes
        self._max_download = max_download_bytes
        self._secret_patterns = tuple(secret_env_patterns)
        chain = paths.user_data.relative_to(data_root).parts
        self._roots: dict[str, _hostfs.HostRoot] = {
            VIRTUAL_USER_DATA: _hostfs.HostRoot(VIRTUAL_USER_DATA, data_root, chain),
            VIRTUAL_WORKSPACE: _hostfs.HostRoot(
                VIRTUAL_WORKSPACE, data_root, (*chain, "workspace")
            ),
            VIRTUAL_UPLOADS: _hostfs.HostRoot(VIRTUAL_UPLOADS, data_root, (*chain, "uploads")),
            VIRTUAL_OUTPUTS: _hostfs.HostRoot(VIRTUAL_OUTPUTS, data_root, (*chain, "outputs")),
        }
        to_host = {VIRTUAL_USER_DATA: str(paths.user_data)}
        if skills_dir is not None:
            self._roots[VIRTUAL_SKILLS] = _hostfs.HostRoot(VIRTUAL_SKILLS, skills_dir)
            to_host[VIRTUAL_SKILLS] = str(skills_dir)
        self._to_host = to_host
        self._to_virtual = dict(host_aliases)

    # --- paths -------------------------------------------------------------------

    def _resolve(self, path: str, *, write: bool = False) -> tuple[_hostfs.HostRoot, VirtualPath]:
        virtual = parse_virtual_path(path)
        root = self._roots.get(virtual.root)
        if root is None:
            raise SandboxError(f"{virtual}: no skills directory is configured")
        if write and not virtual.writable:
            raise SandboxPathError(f"{virtual}: {virtual.root} is read-only")
        return root, virtual

    def to_virtual(self, text: str) -> str:
        """Replace host paths of this sandbox in ``text`` with virtual ones."""
        return host_to_virtual(text, self._to_virtual)

    # --- commands ----------------------------------------------------------------

    async def execute_command(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        if not self._allow_commands:
            raise SandboxError(
                "shell commands are switched off on this server (sandbox.allow_host_bash: false)"
            )
        if not isinstance(command, str) or not command.strip():
            raise SandboxError("command is empty")
        if "\x00" in command:
            raise SandboxError("command contains a NUL byte")
        limit = self._timeout if timeout is None else float(timeout)
        if limit <= 0:
            raise SandboxError(f"timeout must be positive, got {timeout}")
        await asyncio.to_thread(_hostfs.ensure_dirs, self._roots[VIRTUAL_WORKSPACE])
        host_command = virtual_to_host_in_command(command, self._to_host)
        command_env = filter_env(os.environ, env, extra_patterns=self._secret_patterns)
        command_env["PWD"] = str(self.paths.workspace)
        loop = asyncio.get_running_loop()
        capture = _OutputCapture(self._max_output)
        protocol = _CommandProtocol(capture, loop)
        transport, _ = await loop.subprocess_exec(
            lambda: protocol,
            self._shell,
            "-c",
            host_command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=str(self.paths.workspace),
            env=command_env,
            start_new_session=True,
        )
        pid = transport.get_pid()
        timed_out = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(protocol.exited), limit)
            except TimeoutError:
                timed_out = True
                _kill_group(pid)
                await protocol.exited
            if timed_out:
                _kill_group(pid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(protocol.output_closed), _DRAIN_GRACE_SECONDS)
        except BaseException:
            _kill_group(pid)
            raise
        finally:
            transport.close()
        exit_code = transport.get_returncode()
        output, truncated = capture.render()
        return CommandResult(
            output=self.to_virtual(output),
            exit_code=-1 if exit_code is None else exit_code,
            timed_out=timed_out,
            truncated=truncated,
        )

    # --- files -------------------------------------------------------------------

    async def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        root, virtual = self._resolve(path)
        return await asyncio.to_thread(
            _hostfs.read_text,
            root,
            virtual.parts,
            start_line=start_line,
            end_line=end_line,
            max_bytes=self._max_read,
        )

    async def write_file(self, path: str, content: str, append: bool = False) -> None:
        if not isinstance(content, str):
            raise SandboxError("content must be a string")
        root, virtual = self._resolve(path, write=True)
        data = content.encode("utf-8", errors="surrogatepass")
        await asyncio.to_thread(_hostfs.write_bytes, root, virtual.parts, data, append=append)

    async def list_dir(self, path: str, max_depth: int = 2) -> list[str]:
        root, virtual = self._resolve(path)
        depth = min(max(int(max_depth), 1), 5)
        return await asyncio.to_thread(
            _hostfs.list_entries, root, virtual.parts, max_depth=depth, limit=MAX_LIST_ENTRIES
        )

    async def glob(self, pattern: str, path: str) -> list[str]:
        _check_relative_pattern(pattern)
        root, virtual = self._resolve(path)
        return await asyncio.to_thread(
            _hostfs.glob_paths, root, virtual.parts, pattern, limit=MAX_GLOB_RESULTS
        )

    async def grep(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        max_results: int = 100,
    ) -> list[GrepMatch]:
        regex = compile_search_pattern(pattern, literal=literal, case_sensitive=case_sensitive)
        if glob is not None:
            _check_relative_pattern(glob)
        root, virtual = self._resolve(path)
        return await asyncio.to_thread(
            _hostfs.grep_files,
            root,
            virtual.parts,
            regex,
            file_glob=glob,
            max_results=min(max(int(max_results), 1), MAX_GREP_RESULTS),
            max_file_bytes=self._max_read,
        )

    async def upload_bytes(self, path: str, data: bytes) -> None:
        root, virtual = self._resolve(path, write=True)
        await asyncio.to_thread(_hostfs.write_bytes, root, virtual.parts, bytes(data), append=False)

    async def download_bytes(self, path: str) -> bytes:
        root, virtual = self._resolve(path)
        return await asyncio.to_thread(
            _hostfs.read_bytes, root, virtual.parts, max_bytes=self._max_download
        )

    async def is_file(self, path: str) -> bool:
        try:
            root, virtual = self._resolve(path)
        except SandboxError:
            return False
        return await asyncio.to_thread(_hostfs.is_regular_file, root, virtual.parts)


def compile_search_pattern(pattern: str, *, literal: bool, case_sensitive: bool) -> re.Pattern[str]:
    if not isinstance(pattern, str) or pattern == "":
        raise SandboxError("pattern is empty")
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        return re.compile(re.escape(pattern) if literal else pattern, flags)
    except re.error as exc:
        raise SandboxError(
            f"invalid regular expression {pattern!r}: {exc}; pass literal=true to search text"
        ) from None


def _check_relative_pattern(pattern: str) -> None:
    if not isinstance(pattern, str) or not pattern.strip():
        raise SandboxError("glob pattern is empty")
    if pattern.startswith("/") or ".." in pattern.split("/") or "\x00" in pattern:
        raise SandboxPathError(
            f"glob pattern {pattern!r} must be relative to `path` and must not contain '..'"
        )


class LocalSandboxProvider(SandboxProvider):
    """Sandboxes on this host; see the module docstring for what that does not protect."""

    def __init__(
        self,
        data_root: Path | str | None = None,
        *,
        skills_dir: Path | str | None = None,
        allow_host_bash: bool = True,
        command_timeout: float = 300.0,
        max_output_bytes: int = 131072,
        max_read_bytes: int = 10 * 1024 * 1024,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
        secret_env_patterns: Iterable[str] = (),
    ) -> None:
        self.data_root = Path(data_root) if data_root is not None else default_data_root()
        self.skills_dir = Path(skills_dir) if skills_dir is not None else None
        self.allow_host_bash = allow_host_bash
        self.command_timeout = command_timeout
        self.max_output_bytes = max_output_bytes
        self.max_read_bytes = max_read_bytes
        self.max_download_bytes = max_download_bytes
        self.secret_env_patterns = tuple(secret_env_patterns)
        self._sandboxes: dict[str, LocalSandbox] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        if allow_host_bash:
            logger.warning(NOT_ISOLATED_WARNING)
        if _SHELL_UNSAFE.search(str(self.data_root)):
            logger.warning(
                "data_root %s contains characters a shell treats specially; "
                "virtual paths rewritten into commands may not work",
                self.data_root,
            )

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalSandboxProvider:
        from runtime.config import PROJECT_ROOT

        section = settings.sandbox
        skills: Path | None = None
        if section.skills_dir:
            skills = Path(section.skills_dir).expanduser()
            if not skills.is_absolute():
                skills = PROJECT_ROOT / skills
        return cls(
            settings.data_root_path(),
            skills_dir=skills,
            allow_host_bash=section.allow_host_bash,
            command_timeout=section.command_timeout_seconds,
            max_output_bytes=section.max_output_bytes,
            max_read_bytes=section.max_read_bytes,
            secret_env_patterns=section.secret_env_patterns,
        )

    @property
    def allows_commands(self) -> bool:
        return self.allow_host_bash

    @staticmethod
    def sandbox_id_for(user_id: str, thread_id: str) -> str:
        digest = hashlib.sha256(f"{user_id}\x00{thread_id}".encode()).hexdigest()[:24]
        return f"local-{digest}"

    async def acquire(self, thread_id: str, *, user_id: str) -> str:
        for label, value in (("user_id", user_id), ("thread_id", thread_id)):
            if not isinstance(value, str) or make_safe_user_id(value) != value:
                raise SandboxError(f"unsafe {label} {value!r} for a sandbox")
        sandbox_id = self.sandbox_id_for(user_id, thread_id)
        if sandbox_id in self._sandboxes:
            return sandbox_id
        lock = self._locks.setdefault(sandbox_id, asyncio.Lock())
        async with lock:
            if sandbox_id not in self._sandboxes:
                self._sandboxes[sandbox_id] = await asyncio.to_thread(
                    self._create, sandbox_id, user_id, thread_id
                )
        return sandbox_id

    def _create(self, sandbox_id: str, user_id: str, thread_id: str) -> LocalSandbox:
        paths = thread_paths(self.data_root, user_id, thread_id)
        for directory in ("workspace", "uploads", "outputs"):
            _hostfs.ensure_dirs(
                _hostfs.HostRoot(
                    "/mnt/user-data",
                    self.data_root,
                    (*paths.user_data.relative_to(self.data_root).parts, directory),
                )
            )
        aliases: dict[str, str] = {}
        for host, virtual in (
            (paths.user_data, VIRTUAL_USER_DATA),
            (self.skills_dir, VIRTUAL_SKILLS),
        ):
            if host is None:
                continue
            aliases[str(host)] = virtual
            aliases[os.path.realpath(host)] = virtual
        shell = shutil.which("bash") or "/bin/sh"
        return LocalSandbox(
            sandbox_id,
            user_id=user_id,
            thread_id=thread_id,
            paths=paths,
            data_root=self.data_root,
            skills_dir=self.skills_dir,
            shell=shell,
            host_aliases=aliases,
            allow_commands=self.allow_host_bash,
            command_timeout=self.command_timeout,
            max_output_bytes=self.max_output_bytes,
            max_read_bytes=self.max_read_bytes,
            max_download_bytes=self.max_download_bytes,
            secret_env_patterns=self.secret_env_patterns,
        )

    def get(self, sandbox_id: str) -> LocalSandbox | None:
        return self._sandboxes.get(sandbox_id)

    async def release(self, sandbox_id: str) -> None:
        """Nothing to free: the host directories persist for the thread's next run."""
        logger.debug("released local sandbox %s", sandbox_id)

    async def reset(self) -> None:
        self._sandboxes.clear()
        self._locks.clear()
