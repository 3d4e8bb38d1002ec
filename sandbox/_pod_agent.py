"""The helper the Kubernetes provider runs inside a sandbox pod for every operation.

Everything travels on stdin, not in the exec URL (proxies in front of API
servers often cap request lines at 8 KiB, and a command is model-sized): the
exec's argv is only a short bootstrap and two byte counts; stdin carries this
program (zlib-compressed), then the JSON request, then any file bytes. Each
part is read by its exact length, so nothing waits for end of stdin, which the
v4 exec protocol cannot signal.

It must stay self-contained (standard library only) and run on the Python 3.8+
of common sandbox images. Why a helper rather than shell one-liners: one
program gives the sandbox contract's exact semantics (see ``sandbox/base.py``)
for commands (process-group timeout, head-and-tail output cap, exit code),
files (exact byte counts, binary detection, links never followed: every path
is walked one component at a time with ``O_NOFOLLOW``) and searches (Python
regexes and globs, like the local provider), and every model-controlled value
arrives as data, never as shell text.

Protocol: the payload (command output, file bytes or a JSON result) goes to
stdout; one result line ``DEERFLOW-RESULT {json}`` goes to stderr last.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import time

RESULT_MARKER = "DEERFLOW-RESULT "
PID_MARKER = "DEERFLOW-PID "

USER_DATA = "/mnt/user-data"
WORKSPACE = USER_DATA + "/workspace"
UPLOADS = USER_DATA + "/uploads"
OUTPUTS = USER_DATA + "/outputs"
SKILLS = "/mnt/skills"
# Longest first: the first root that prefixes a path wins.
ROOTS = (WORKSPACE, UPLOADS, OUTPUTS, SKILLS, USER_DATA)
READ_ONLY_ROOTS = (SKILLS, USER_DATA)

CHUNK = 65536
BINARY_SNIFF_BYTES = 8192
MAX_LIST_ENTRIES = 1000
MAX_GLOB_RESULTS = 1000
MAX_GREP_LINE = 500

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class AgentError(Exception):
    """An error the provider turns into a SandboxError (``path`` kinds: SandboxPathError)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _emit_result(result: dict) -> None:
    sys.stdout.flush()
    sys.stderr.write(RESULT_MARKER + json.dumps(result) + "\n")
    sys.stderr.flush()


# --- paths: walked component by component, links refused -------------------------


def split_virtual(path: str) -> tuple:
    """(root, parts) of an already-normalised virtual path (re-checked here)."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        raise AgentError("path", f"{path!r} is not a sandbox path")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise AgentError("path", f"{path!r}: '..' is not allowed in sandbox paths")
    for root in ROOTS:
        root_parts = root.strip("/").split("/")
        if parts[: len(root_parts)] == root_parts:
            rest = tuple(parts[len(root_parts) :])
            if root == USER_DATA and rest:
                break
            return root, rest
    raise AgentError("path", f"{path!r} is outside the sandbox")


def _shown(root: str, parts: tuple) -> str:
    return "/".join((root, *parts)) if parts else root


def _open_root(root: str, create: bool) -> int:
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        if create and root.startswith(USER_DATA + "/"):
            os.makedirs(root, exist_ok=True)
            return os.open(root, _DIR_FLAGS)
        raise AgentError("not_found", f"{root}: no such directory") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise AgentError("path", f"{root} is not a plain directory") from None
        raise


def _step(dir_fd: int, name: str, shown: str, create: bool) -> int:
    """Open child directory ``name`` of ``dir_fd`` without following a link."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            raise AgentError("not_found", f"{shown}: no such file or directory") from None
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=dir_fd)
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        raise AgentError("path", f"{shown} is a symbolic link; links are never followed")
    if not stat.S_ISDIR(info.st_mode):
        raise AgentError("not_dir", f"{shown} is not a directory")
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise AgentError("path", f"{shown} changed while it was opened") from None
        raise


def open_dir(root: str, parts: tuple, create: bool = False) -> int:
    fd = _open_root(root, create)
    try:
        for index, name in enumerate(parts):
            child = _step(fd, name, _shown(root, parts[: index + 1]), create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _leaf(root: str, parts: tuple) -> tuple:
    if not parts:
        raise AgentError("is_dir", f"{root} is a directory, not a file")
    return parts[:-1], parts[-1], _shown(root, parts)


def _open_file(root: str, parts: tuple, flags: int, create_parents: bool) -> int:
    parents, name, shown = _leaf(root, parts)
    dir_fd = open_dir(root, parents, create=create_parents)
    try:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise AgentError("not_found", f"{shown}: no such file") from None
            info = None
        if info is not None:
            if stat.S_ISLNK(info.st_mode):
                raise AgentError("path", f"{shown} is a symbolic link; links are never followed")
            if stat.S_ISDIR(info.st_mode):
                raise AgentError("is_dir", f"{shown} is a directory, not a file")
            if not stat.S_ISREG(info.st_mode):
                raise AgentError("not_file", f"{shown} is not a regular file")
        try:
            fd = os.open(name, flags, 0o666, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise AgentError(
                    "path", f"{shown} is a symbolic link; links are never followed"
                ) from None
            raise
        os.set_blocking(fd, True)
        return fd
    finally:
        os.close(dir_fd)


# --- commands ---------------------------------------------------------------------


class _Capture:
    """Forwards the head of a stream as it arrives and keeps a rolling tail."""

    def __init__(self, limit: int, out) -> None:
        self.tail_limit = limit // 2
        self.head_limit = limit - self.tail_limit
        self.head = 0
        self.tail = bytearray()
        self.total = 0
        self.out = out

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - self.head
        if room > 0:
            self.out.write(data[:room])
            self.out.flush()
            self.head += min(room, len(data))
            data = data[room:]
        if not data or self.tail_limit == 0:
            return
        self.tail += data
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            del self.tail[:excess]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def op_exec(req: dict) -> None:
    shell = req.get("shell") or "/bin/sh"
    if not os.path.exists(shell):
        shell = "/bin/sh"
    os.makedirs(WORKSPACE, exist_ok=True)
    timeout = float(req.get("timeout") or 300)
    env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
    proc = subprocess.Popen(
        [shell, "-c", req["command"]],
        cwd=WORKSPACE,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdout is not None
    # The provider kills this process group if the run is cancelled mid-command.
    sys.stderr.write(f"{PID_MARKER}{proc.pid}\n")
    sys.stderr.flush()
    fd = proc.stdout.fileno()
    capture = _Capture(int(req.get("max_output") or 131072), sys.stdout.buffer)
    deadline = time.monotonic() + timeout
    timed_out = False
    exited_at = None
    grace = float(req.get("drain_grace") or 2.0)
    while True:
        now = time.monotonic()
        if not timed_out and now >= deadline:
            timed_out = True
            _kill_group(proc.pid)
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        # A background child may keep the pipe open after the shell exits:
        # read what it writes for a short grace, then stop.
        if exited_at is not None and now - exited_at > grace:
            break
        wait = 0.2 if exited_at is not None or timed_out else max(0.0, min(1.0, deadline - now))
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            continue
        chunk = os.read(fd, CHUNK)
        if not chunk:
            break
        capture.feed(chunk)
    if timed_out:
        _kill_group(proc.pid)
        code = proc.wait()
    else:
        try:
            code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            code = proc.wait()
    if code < 0:
        code = 128 - code
    sys.stdout.buffer.write(bytes(capture.tail))
    _emit_result(
        {
            "ok": True,
            "exit_code": code,
            "timed_out": timed_out,
            "total": capture.total,
            "head": capture.head,
            "tail": len(capture.tail),
        }
    )


# --- files ------------------------------------------------------------------------


class _Payload:
    """The file bytes that follow the request on stdin: exactly ``size`` of them.

    Always read through ``sys.stdin.buffer``: the bootstrap read this program
    from it, and its buffer may already hold the bytes that follow.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.remaining = size

    def copy_to(self, fd) -> int:
        """Copy the rest into file descriptor ``fd`` (None: discard); returns bytes read."""
        stream = sys.stdin.buffer
        start = self.remaining
        while self.remaining > 0:
            chunk = stream.read(min(CHUNK, self.remaining))
            if not chunk:
                break
            if fd is not None:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            self.remaining -= len(chunk)
        return start - self.remaining


def op_read(req: dict) -> None:
    root, parts = split_virtual(req["path"])
    shown = _shown(root, parts)
    max_bytes = int(req["max_bytes"])
    out = sys.stdout.buffer
    fd = _open_file(root, parts, _READ_FLAGS, create_parents=False)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if req.get("mode") == "bytes":
            if size > max_bytes:
                raise AgentError(
                    "too_large",
                    f"{shown}: file is {size} bytes, more than the {max_bytes}-byte limit",
                )
            data = handle.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise AgentError("too_large", f"{shown}: file grew past the {max_bytes}-byte limit")
            out.write(data)
            _emit_result({"ok": True, "size": len(data)})
            return
        head = handle.read(BINARY_SNIFF_BYTES)
        if b"\x00" in head:
            raise AgentError(
                "binary",
                f"{shown}: is a binary file; inspect it with bash (e.g. `xxd`, `file`) instead",
            )
        start, end = req.get("start_line"), req.get("end_line")
        if start is None and end is None:
            if size > max_bytes:
                raise AgentError(
                    "too_large",
                    f"{shown}: file is {size} bytes, more than the {max_bytes}-byte limit "
                    "for a whole read; read a line range (start_line/end_line) instead",
                )
            data = head + handle.read(max_bytes + 1 - len(head))
            if len(data) > max_bytes:
                raise AgentError("too_large", f"{shown}: file grew past the {max_bytes}-byte limit")
            out.write(data)
            _emit_result({"ok": True, "size": len(data)})
            return
        handle.seek(0)
        first = int(start or 1)
        collected = []
        total = 0
        number = 0
        while True:
            line = handle.readline(max_bytes + 1)
            if not line:
                break
            long_line = len(line) > max_bytes and not line.endswith(b"\n")
            while long_line:
                rest = handle.readline(CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            number += 1
            if end is not None and number > int(end):
                break
            if number < first:
                continue
            total += max_bytes + 1 if long_line else len(line)
            if total > max_bytes:
                raise AgentError(
                    "too_large",
                    f"{shown}: the requested lines exceed the {max_bytes}-byte limit; "
                    "read a smaller range",
                )
            collected.append(line)
        out.write(b"".join(collected))
        _emit_result({"ok": True, "size": total})


def op_write(req: dict) -> None:
    size = int(req["size"])
    payload = _Payload(size)
    append = bool(req.get("append"))
    try:
        root, parts = split_virtual(req["path"])
        if root in READ_ONLY_ROOTS:
            raise AgentError("read_only", f"{_shown(root, parts)}: {root} is read-only")
        parents, name, shown = _leaf(root, parts)
        if append:
            fd = _open_file(root, parts, _WRITE_FLAGS | os.O_APPEND, create_parents=True)
            try:
                got = payload.copy_to(fd)
            finally:
                os.close(fd)
        else:
            got = _replace(root, parents, name, shown, payload)
    except BaseException:
        payload.copy_to(None)  # consume what the client still sends, then report
        raise
    if got != size:
        raise AgentError("short_write", f"received {got} of {size} bytes for {req['path']}")
    _emit_result({"ok": True, "written": got})


def _replace(root: str, parents: tuple, name: str, shown: str, payload: _Payload) -> int:
    """Write to a temporary file beside the target, then rename over it (never a link)."""
    dir_fd = open_dir(root, parents, create=True)
    temp = f".{name[:200]}.deerflow-{os.getpid()}.tmp"
    try:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise AgentError("path", f"{shown} is a symbolic link; links are never followed")
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise AgentError("is_dir", f"{shown} is a directory, not a file")
        fd = os.open(temp, _WRITE_FLAGS | os.O_TRUNC | os.O_EXCL, 0o666, dir_fd=dir_fd)
        try:
            got = payload.copy_to(fd)
        finally:
            os.close(fd)
        if got == payload.size:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return got
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        os.close(dir_fd)


SKILLS_MARKER = ".deerflow-skills-digest"


def _writable_tree(path: str) -> None:
    for current, dirs, files in os.walk(path):
        os.chmod(current, 0o755)
        for name in files:
            full = os.path.join(current, name)
            if not os.path.islink(full):
                os.chmod(full, 0o644)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(current, d))]


def _drop_tree(path: str) -> None:
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            _writable_tree(path)
            import shutil

            shutil.rmtree(path)
        else:
            os.unlink(path)


def op_install_skills(req: dict) -> None:
    """Replace /mnt/skills/{public,custom} with the server's projection (a tar on stdin).

    Only the provider sends this, at acquire; the model's file tools cannot
    (``write`` refuses /mnt/skills). Members must be plain files or directories
    under public/ or custom/; files end up 0444 (0555 executable), dirs 0555.
    """
    import io
    import tarfile

    size = int(req["size"])
    digest = str(req["digest"])
    payload = _Payload(size)
    buffer = io.BytesIO()
    stream = sys.stdin.buffer
    while payload.remaining > 0:
        chunk = stream.read(min(CHUNK, payload.remaining))
        if not chunk:
            break
        buffer.write(chunk)
        payload.remaining -= len(chunk)
    if payload.remaining:
        raise AgentError("short_write", f"received {size - payload.remaining} of {size} bytes")
    marker = os.path.join(SKILLS, SKILLS_MARKER)
    with contextlib.suppress(OSError), open(marker, encoding="utf-8") as handle:
        if handle.read().strip() == digest:
            _emit_result({"ok": True, "installed": False})
            return
    staging = os.path.join(SKILLS, f".staging-{os.getpid()}")
    _drop_tree(staging)
    os.mkdir(staging, 0o755)
    buffer.seek(0)
    modes = []
    with tarfile.open(fileobj=buffer, mode="r:") as tar:
        for member in tar.getmembers():
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if not parts or parts[0] not in ("public", "custom") or ".." in parts:
                raise AgentError("path", f"bad skills archive member {member.name!r}")
            if member.name.startswith("/"):
                raise AgentError("path", f"bad skills archive member {member.name!r}")
            dest = os.path.join(staging, *parts)
            if member.isdir():
                os.makedirs(dest, 0o755, exist_ok=True)
                modes.append((dest, 0o555))
            elif member.isfile():
                os.makedirs(os.path.dirname(dest), 0o755, exist_ok=True)
                source = tar.extractfile(member)
                with open(dest, "wb") as out:
                    out.write(source.read() if source is not None else b"")
                modes.append((dest, 0o555 if member.mode & 0o100 else 0o444))
            else:
                raise AgentError("path", f"skills archive member {member.name!r} is not a file")
    for sub in ("public", "custom"):
        os.makedirs(os.path.join(staging, sub), 0o755, exist_ok=True)
    for path, mode in sorted(modes, key=lambda item: -len(item[0])):
        os.chmod(path, mode)
    for sub in ("public", "custom"):
        os.chmod(os.path.join(staging, sub), 0o555)
        _drop_tree(os.path.join(SKILLS, sub))
        os.rename(os.path.join(staging, sub), os.path.join(SKILLS, sub))
    os.rmdir(staging)
    with contextlib.suppress(FileNotFoundError):
        os.chmod(marker, 0o644)
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write(digest)
    os.chmod(marker, 0o444)
    _emit_result({"ok": True, "installed": True})


def op_kill(req: dict) -> None:
    """Kill a command's process group (the run that started it was cancelled)."""
    pid = int(req["pid"])
    if pid > 1:
        _kill_group(pid)
    _emit_result({"ok": True})


def op_is_file(req: dict) -> None:
    result = False
    with contextlib.suppress(AgentError, OSError):
        root, parts = split_virtual(req["path"])
        if parts:
            dir_fd = open_dir(root, parts[:-1])
            try:
                info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                result = stat.S_ISREG(info.st_mode)
            finally:
                os.close(dir_fd)
    sys.stdout.write(json.dumps(result))
    _emit_result({"ok": True})


# --- listing and searching --------------------------------------------------------


def _walk(dir_fd: int, prefix: tuple, max_depth, depth: int = 1):
    """Yield (parent parts, name, kind, dir_fd); kind is dir|file|link|other.

    Links are reported, never entered.
    """
    with os.scandir(dir_fd) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    for entry in entries:
        if entry.is_symlink():
            kind = "link"
        elif entry.is_dir(follow_symlinks=False):
            kind = "dir"
        elif entry.is_file(follow_symlinks=False):
            kind = "file"
        else:
            kind = "other"
        yield prefix, entry.name, kind, dir_fd
        if kind == "dir" and (max_depth is None or depth < max_depth):
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from _walk(child, (*prefix, entry.name), max_depth, depth + 1)
            finally:
                os.close(child)


def op_list(req: dict) -> None:
    root, parts = split_virtual(req["path"])
    max_depth = min(max(int(req.get("max_depth") or 2), 1), 5)
    base = _shown(root, parts)
    entries = []
    fd = open_dir(root, parts)
    try:
        for prefix, name, kind, _ in _walk(fd, (), max_depth):
            suffix = {"dir": "/", "link": "@"}.get(kind, "")
            entries.append("/".join((base, *prefix, name)) + suffix)
            if len(entries) >= MAX_LIST_ENTRIES:
                break
    finally:
        os.close(fd)
    sys.stdout.write(json.dumps(entries))
    _emit_result({"ok": True, "count": len(entries)})


def glob_regex(pattern: str):
    """A regex for a ``**``-aware glob over '/'-separated relative paths."""
    out = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif char == "*":
            out.append("[^/]*")
            index += 1
        elif char == "?":
            out.append("[^/]")
            index += 1
        elif char == "[":
            close = pattern.find("]", index + 2 if pattern.startswith("[!", index) else index + 1)
            if close == -1:
                out.append(re.escape(char))
                index += 1
                continue
            body = pattern[index + 1 : close]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            index = close + 1
        else:
            out.append(re.escape(char))
            index += 1
    return re.compile("(?s:" + "".join(out) + r")\Z")


def _check_pattern(pattern) -> str:
    if not isinstance(pattern, str) or not pattern.strip():
        raise AgentError("invalid_pattern", "glob pattern is empty")
    if pattern.startswith("/") or ".." in pattern.split("/") or "\x00" in pattern:
        raise AgentError(
            "path", f"glob pattern {pattern!r} must be relative to `path` and must not contain '..'"
        )
    return pattern


def op_glob(req: dict) -> None:
    root, parts = split_virtual(req["path"])
    matcher = glob_regex(_check_pattern(req["pattern"]))
    base = _shown(root, parts)
    matches = []
    fd = open_dir(root, parts)
    try:
        for prefix, name, kind, _ in _walk(fd, (), None):
            relative = "/".join((*prefix, name))
            if matcher.match(relative):
                matches.append(f"{base}/{relative}" + ("/" if kind == "dir" else ""))
                if len(matches) >= MAX_GLOB_RESULTS:
                    break
    finally:
        os.close(fd)
    sys.stdout.write(json.dumps(matches))
    _emit_result({"ok": True, "count": len(matches)})


def _grep_one(dir_fd: int, name: str, regex, shown: str, max_bytes: int, limit: int) -> list:
    found: list = []
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return found
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return found
        os.set_blocking(handle.fileno(), True)
        if b"\x00" in handle.read(BINARY_SNIFF_BYTES):
            return found
        handle.seek(0)
        for number, raw in enumerate(handle, start=1):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if regex.search(line):
                found.append([shown, number, line[:MAX_GREP_LINE]])
                if len(found) >= limit:
                    break
    return found


def op_grep(req: dict) -> None:
    root, parts = split_virtual(req["path"])
    flags = 0 if req.get("case_sensitive") else re.IGNORECASE
    pattern = req["pattern"]
    try:
        regex = re.compile(re.escape(pattern) if req.get("literal") else pattern, flags)
    except re.error as exc:
        raise AgentError(
            "invalid_pattern",
            f"invalid regular expression {pattern!r}: {exc}; pass literal=true to search text",
        ) from None
    file_glob = req.get("glob")
    name_matcher = glob_regex(_check_pattern(file_glob)) if file_glob is not None else None
    max_results = max(1, int(req.get("max_results") or 100))
    max_bytes = int(req["max_bytes"])
    matches: list = []
    single = False
    if parts:
        with contextlib.suppress(AgentError, OSError):
            dir_fd = open_dir(root, parts[:-1])
            try:
                info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISREG(info.st_mode):
                    single = True
                    matches = _grep_one(
                        dir_fd, parts[-1], regex, _shown(root, parts), max_bytes, max_results
                    )
            finally:
                os.close(dir_fd)
    if not single:
        fd = open_dir(root, parts)
        base = _shown(root, parts)
        try:
            for prefix, name, kind, dir_fd in _walk(fd, (), None):
                if kind != "file":
                    continue
                relative = "/".join((*prefix, name))
                if name_matcher and not (name_matcher.match(name) or name_matcher.match(relative)):
                    continue
                matches.extend(
                    _grep_one(
                        dir_fd,
                        name,
                        regex,
                        f"{base}/{relative}",
                        max_bytes,
                        max_results - len(matches),
                    )
                )
                if len(matches) >= max_results:
                    break
        finally:
            os.close(fd)
    sys.stdout.write(json.dumps(matches))
    _emit_result({"ok": True, "count": len(matches)})


OPS = {
    "exec": op_exec,
    "kill": op_kill,
    "read": op_read,
    "write": op_write,
    "is_file": op_is_file,
    "list": op_list,
    "glob": op_glob,
    "grep": op_grep,
    "install_skills": op_install_skills,
}


def main(argv: list) -> int:
    """``argv[0]``: the byte length of the JSON request that comes next on stdin."""
    try:
        size = int(argv[0])
        req = json.loads(sys.stdin.buffer.read(size).decode("utf-8"))
        op = OPS[req["op"]]
    except (IndexError, ValueError, KeyError, TypeError):
        _emit_result({"ok": False, "kind": "protocol", "message": "bad helper request"})
        return 2
    try:
        op(req)
    except AgentError as exc:
        _emit_result({"ok": False, "kind": exc.kind, "message": exc.message})
        return 1
    except OSError as exc:
        kind = "not_found" if exc.errno == errno.ENOENT else "os"
        where = exc.filename if isinstance(exc.filename, str) else ""
        message = f"{exc.strerror or exc}" + (f": {where}" if where else "")
        _emit_result({"ok": False, "kind": kind, "message": message})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
