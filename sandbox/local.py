"""The local sandbox provider: host directories, and commands in Linux namespaces.

On Linux where user namespaces are allowed (checked once, at the first
acquire), every shell command runs isolated (``sandbox.isolation``): its own
user, pid, mount, IPC, UTS and network namespaces, a private root holding
only the read-only system directories, this thread's ``/mnt/user-data`` and
``/tmp`` and the read-only ``/mnt/skills``, no capabilities, resource limits,
and no process left behind when the command ends (``sandbox.isolation``
module). Paths inside are the virtual ones; nothing of the server (its
environment, processes, other users' directories) is visible.

Without namespaces the command would run on the host as the server's user,
which is NOT a boundary: then commands are refused unless auth mode is
``none`` or ``sandbox.allow_unisolated_bash`` is true, and the log says so
loudly. File tools work either way: they refuse escapes, never follow links
and refuse hard-linked files. ``sandbox.allow_host_bash: false`` switches
commands off altogether.
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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from runtime.identity import make_safe_user_id
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
from sandbox.isolation import CommandLauncher, CommandLimits, probe_namespaces
from sandbox.paths import (
    VirtualPath,
    host_to_virtual,
    parse_virtual_path,
    virtual_to_host_in_command,
)

if TYPE_CHECKING:
    from runtime.config import Settings

__all__ = [
    "ISOLATION_MODES",
    "NOT_ISOLATED_WARNING",
    "LocalSandbox",
    "LocalSandboxProvider",
]

logger = logging.getLogger(__name__)

NOT_ISOLATED_WARNING = (
    "!!! LocalSandboxProvider runs agent commands on this host as the server's user, "
    "WITHOUT namespaces: it is NOT an isolation boundary (a command can read the "
    "server's environment, processes and every user's files). Use it for development "
    "only (set sandbox.allow_host_bash: false to switch commands off) !!!"
)
ISOLATION_MODES = ("auto", "required", "off")
_ISOLATED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
        launcher: CommandLauncher | None = None,
        refusal: str | None = None,
        search_timeout: float = 10.0,
    ) -> None:
        super().__init__(sandbox_id, user_id=user_id, thread_id=thread_id)
        self._launcher = launcher or CommandLauncher(limits=CommandLimits(), root=None)
        self._refusal = refusal
        self._search_timeout = search_timeout
        self._skills_dir = skills_dir
        thread_chain = paths.user_data.parent.relative_to(data_root).parts
        self._tmp_root = _hostfs.HostRoot("/tmp", data_root, (*thread_chain, "tmp"))
        self._thread_root = _hostfs.HostRoot("/", data_root, thread_chain)
        launcher = self._launcher
        # A root server hands the thread's directories to the sandbox's unprivileged user.
        self._owner = (
            (launcher.uid, launcher.gid) if launcher.isolated and os.geteuid() == 0 else None
        )
        self._prepared = False
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
        if self._refusal is not None:
            raise SandboxError(self._refusal)
        if not isinstance(command, str) or not command.strip():
            raise SandboxError("command is empty")
        if "\x00" in command:
            raise SandboxError("command contains a NUL byte")
        limit = self._timeout if timeout is None else float(timeout)
        if limit <= 0:
            raise SandboxError(f"timeout must be positive, got {timeout}")
        await asyncio.to_thread(_hostfs.ensure_dirs, self._roots[VIRTUAL_WORKSPACE])
        launcher = self._launcher
        if launcher.isolated:
            if not self._prepared:
                await asyncio.to_thread(self._prepare_dirs)
            base = {
                "PATH": _ISOLATED_PATH,
                "HOME": VIRTUAL_WORKSPACE,
                "PWD": VIRTUAL_WORKSPACE,
                "TMPDIR": "/tmp",
                "LANG": "C.UTF-8",
                "TERM": "dumb",
                "USER": "sandbox",
            }
            plan = launcher.plan(
                command,
                env=filter_env(base, env, extra_patterns=self._secret_patterns),
                cwd=VIRTUAL_WORKSPACE,
                user_data=str(self.paths.user_data),
                tmp=str(self.paths.user_data.parent / "tmp"),
                skills=str(self._skills_dir) if self._skills_dir is not None else None,
            )
        else:
            command_env = filter_env(os.environ, env, extra_patterns=self._secret_patterns)
            command_env["PWD"] = str(self.paths.workspace)
            plan = launcher.plan(
                virtual_to_host_in_command(command, self._to_host),
                env=command_env,
                cwd=str(self.paths.workspace),
                shell=self._shell,
            )
        loop = asyncio.get_running_loop()
        capture = _OutputCapture(self._max_output)
        protocol = _CommandProtocol(capture, loop)
        transport, _ = await loop.subprocess_exec(
            lambda: protocol,
            *plan.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=str(self.paths.workspace),
            env={"PATH": os.defpath, "LANG": "C.UTF-8"},
            start_new_session=True,
        )
        pid = transport.get_pid()
        # Duck-typed: uvloop's pipe transports are not asyncio.WriteTransport subclasses.
        stdin = cast("asyncio.WriteTransport | None", transport.get_pipe_transport(0))
        if stdin is None:
            _kill_group(pid)
            transport.close()
            raise SandboxError("the command's input pipe could not be opened")
        stdin.write(plan.spec)
        stdin.close()
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

    def _prepare_dirs(self) -> None:
        _hostfs.ensure_dirs(self._tmp_root)
        for name in ("workspace", "uploads", "outputs"):
            _hostfs.ensure_dirs(self._roots[f"{VIRTUAL_USER_DATA}/{name}"])
        if self._owner is not None:
            for parts in (
                ("user-data",),
                ("user-data", "workspace"),
                ("user-data", "uploads"),
                ("user-data", "outputs"),
                ("tmp",),
            ):
                _hostfs.give_to(self._thread_root, parts, *self._owner)
        self._prepared = True

    def _hand_over(self, root: _hostfs.HostRoot, parts: tuple[str, ...]) -> None:
        if self._owner is not None:
            _hostfs.give_to(root, parts, *self._owner)

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
        if self._owner is not None:
            await asyncio.to_thread(self._hand_over, root, virtual.parts)

    async def list_dir(self, path: str, max_depth: int = 2) -> list[str]:
        root, virtual = self._resolve(path)
        depth = min(max(int(max_depth), 1), 5)
        return await asyncio.to_thread(
            _hostfs.list_entries, root, virtual.parts, max_depth=depth, limit=MAX_LIST_ENTRIES
        )

    async def glob(self, pattern: str, path: str) -> list[str]:
        _check_relative_pattern(pattern)
        root, virtual = self._resolve(path)
        found = await _hostfs.search_in_subprocess(
            root,
            virtual.parts,
            {"op": "glob", "pattern": pattern, "limit": MAX_GLOB_RESULTS},
            timeout=self._search_timeout,
        )
        return [str(p) for p in found]

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
        compile_search_pattern(pattern, literal=literal, case_sensitive=case_sensitive)
        if glob is not None:
            _check_relative_pattern(glob)
        root, virtual = self._resolve(path)
        found = await _hostfs.search_in_subprocess(
            root,
            virtual.parts,
            {
                "op": "grep",
                "pattern": pattern,
                "literal": bool(literal),
                "case_sensitive": bool(case_sensitive),
                "glob": glob,
                "max_results": min(max(int(max_results), 1), MAX_GREP_RESULTS),
                "max_bytes": self._max_read,
            },
            timeout=self._search_timeout,
        )
        return [GrepMatch(path=str(p), line_number=int(n), line=str(line)) for p, n, line in found]

    async def upload_bytes(self, path: str, data: bytes) -> None:
        root, virtual = self._resolve(path, write=True)
        await asyncio.to_thread(_hostfs.write_bytes, root, virtual.parts, bytes(data), append=False)
        if self._owner is not None:
            await asyncio.to_thread(self._hand_over, root, virtual.parts)

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
        isolation: str = "auto",
        allow_unisolated_bash: bool = False,
        auth_mode: str | None = None,
        network: bool = False,
        limits: CommandLimits | None = None,
        search_timeout: float = 10.0,
        skills_projection: Callable[[], Path | None] | None = None,
    ) -> None:
        self.search_timeout = search_timeout
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        self.isolation = isolation
        self.allow_unisolated_bash = allow_unisolated_bash
        self.auth_mode = auth_mode
        self.network = network
        self.limits = limits or CommandLimits()
        self._launcher: CommandLauncher | None = None
        self._refusal: str | None = None
        self._probe_lock = asyncio.Lock()
        self.data_root = Path(data_root) if data_root is not None else default_data_root()
        self.skills_dir = Path(skills_dir) if skills_dir is not None else None
        # Without a fixed skills_dir: the enabled skills' projection (sandbox/skills.py),
        # built off the event loop when the first sandbox is created.
        self.skills_projection = skills_projection
        self.allow_host_bash = allow_host_bash
        self.command_timeout = command_timeout
        self.max_output_bytes = max_output_bytes
        self.max_read_bytes = max_read_bytes
        self.max_download_bytes = max_download_bytes
        self.secret_env_patterns = tuple(secret_env_patterns)
        self._sandboxes: dict[str, LocalSandbox] = {}
        self._locks: dict[str, asyncio.Lock] = {}
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
        projection = None
        if section.skills_dir:
            skills = Path(section.skills_dir).expanduser()
            if not skills.is_absolute():
                skills = PROJECT_ROOT / skills
        elif settings.skills.enabled:
            from sandbox.skills import projection_source

            projection = projection_source(settings)
        return cls(
            settings.data_root_path(),
            skills_dir=skills,
            allow_host_bash=section.allow_host_bash,
            command_timeout=section.command_timeout_seconds,
            max_output_bytes=section.max_output_bytes,
            max_read_bytes=section.max_read_bytes,
            secret_env_patterns=section.secret_env_patterns,
            isolation=section.isolation,
            search_timeout=section.search_timeout_seconds,
            allow_unisolated_bash=section.allow_unisolated_bash,
            auth_mode=settings.auth.effective_mode,
            network=section.network,
            limits=CommandLimits(
                max_processes=section.limits.max_processes,
                max_memory_bytes=section.limits.max_memory_mb * 1024 * 1024,
                max_cpu_seconds=section.limits.max_cpu_seconds,
                max_file_bytes=section.limits.max_file_mb * 1024 * 1024,
                max_open_files=section.limits.max_open_files,
            ),
            skills_projection=projection,
        )

    @property
    def allows_commands(self) -> bool:
        """False when commands are off, or when the isolation check refused them."""
        if not self.allow_host_bash:
            return False
        return self._launcher is None or self._refusal is None

    @property
    def isolated(self) -> bool | None:
        """Whether commands run in namespaces (None until the first acquire checked)."""
        return None if self._launcher is None else self._launcher.isolated

    def _setup_commands(self) -> tuple[CommandLauncher, str | None]:
        """Check once whether commands can be isolated, and decide what to do if not."""
        reason: str | None = "sandbox.isolation is 'off'"
        root = None
        if self.isolation != "off":
            reason, root = probe_namespaces(network=self.network)
        launcher = CommandLauncher(limits=self.limits, root=root, network=self.network)
        if not self.allow_host_bash:
            return launcher, None
        if launcher.isolated:
            logger.info(
                "local sandbox: every command runs in its own user/pid/mount/ipc/uts%s "
                "namespaces with limits %s",
                "" if self.network else "/net",
                self.limits,
            )
            return launcher, None
        if self.isolation == "required":
            refusal = (
                f"shell commands are off on this server: sandbox.isolation is 'required' but "
                f"{reason}"
            )
            logger.error("local sandbox: %s", refusal)
            return launcher, refusal
        if self.auth_mode == "none" or self.allow_unisolated_bash:
            logger.warning("%s (why: %s)", NOT_ISOLATED_WARNING, reason)
            return launcher, None
        refusal = (
            f"shell commands are off on this server: they cannot be isolated ({reason}), and "
            "host commands are only allowed in auth mode 'none' or with "
            "sandbox.allow_unisolated_bash: true"
        )
        logger.error("local sandbox: %s", refusal)
        return launcher, refusal

    async def start(self) -> None:
        """Check isolation at server start (the app's lifespan calls this), so the log says
        at once whether commands are isolated, refused, or (loudly) run on the host."""
        await self._ensure_setup()

    async def _ensure_setup(self) -> None:
        if self._launcher is not None:
            return
        async with self._probe_lock:
            if self._launcher is None:
                launcher, refusal = await asyncio.to_thread(self._setup_commands)
                self._refusal = refusal
                self._launcher = launcher

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
        await self._ensure_setup()
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
        skills_dir = self.skills_dir
        if skills_dir is None and self.skills_projection is not None:
            skills_dir = self.skills_projection()
        aliases: dict[str, str] = {}
        for host, virtual in (
            (paths.user_data, VIRTUAL_USER_DATA),
            (skills_dir, VIRTUAL_SKILLS),
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
            skills_dir=skills_dir,
            shell=shell,
            host_aliases=aliases,
            allow_commands=self.allow_host_bash,
            command_timeout=self.command_timeout,
            max_output_bytes=self.max_output_bytes,
            max_read_bytes=self.max_read_bytes,
            max_download_bytes=self.max_download_bytes,
            secret_env_patterns=self.secret_env_patterns,
            launcher=self._launcher,
            refusal=self._refusal,
            search_timeout=self.search_timeout,
        )

    def get(self, sandbox_id: str) -> LocalSandbox | None:
        return self._sandboxes.get(sandbox_id)

    async def release(self, sandbox_id: str) -> None:
        """Nothing to free: the host directories persist for the thread's next run."""
        logger.debug("released local sandbox %s", sandbox_id)

    async def reset(self) -> None:
        self._sandboxes.clear()
        self._locks.clear()
