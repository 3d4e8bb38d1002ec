"""The helper the Kubernetes provider runs inside a sandbox pod for every operation.

Everything travels on stdin, not in the exec URL (proxies in front of API
servers often cap request lines at 8 KiB, and a command is model-sized): the
exec's argv is only a short bootstrap and two byte counts, stdin carries this
program (zlib-compressed), then the JSON request, then any file bytes. Each
part is read by its exact length, so nothing waits for end of stdin, which the
v4 exec protocol cannot signal.

It must stay self-contained (standard library only) and run on the Python 3.8+
of common sandbox images. Why a helper rather than shell one-liners: one
program gives the same semantics for commands (process-group timeout, bounded
output, exit code), files (exact byte counts) and searches (Python regexes and
globs, like the local provider), and every model-controlled value arrives as
data, never as shell text.

Protocol: the payload (command output, file bytes or a JSON result) goes to
stdout; one result line ``DEERFLOW-RESULT {json}`` goes to stderr last.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
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

USER_DATA = "/mnt/user-data"
WRITABLE_ROOTS = (USER_DATA + "/workspace", USER_DATA + "/uploads", USER_DATA + "/outputs")
READ_ONLY_ROOTS = ("/mnt/skills",)
ALL_ROOTS = (USER_DATA, *READ_ONLY_ROOTS)

IGNORED_NAMES = frozenset(
    {
        ".git",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".idea",
        ".vscode",
        ".DS_Store",
    }
)

CHUNK = 65536
MAX_LIST_ENTRIES = 2000
MAX_GREP_LINE = 1000
MAX_GREP_FILE_BYTES = 20 * 1024 * 1024


class AgentError(Exception):
    """An error the provider turns into a SandboxError (kind picks the class)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _emit_result(result: dict) -> None:
    sys.stdout.flush()
    sys.stderr.write(RESULT_MARKER + json.dumps(result) + "\n")
    sys.stderr.flush()


def _within(path: str, roots: tuple) -> str | None:
    for root in roots:
        if path == root or path.startswith(root + "/"):
            return root
    return None


def resolve(path: str, roots: tuple = ALL_ROOTS) -> str:
    """The real path of a virtual path, refusing anything that leaves ``roots``.

    Symlinks are resolved first, so a link pointing out of the sandbox's
    directories is refused rather than followed.
    """
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        raise AgentError("path", f"path must be an absolute sandbox path: {path!r}")
    if ".." in path.split("/"):
        raise AgentError("path", f"path may not contain '..': {path}")
    normal = os.path.normpath(path)
    if _within(normal, roots) is None:
        raise AgentError("path", f"path is outside the sandbox directories: {path}")
    real = os.path.realpath(normal)
    if _within(real, roots) is None:
        raise AgentError("path", f"path resolves outside the sandbox directories: {path}")
    return real


def _ignored(name: str) -> bool:
    return name in IGNORED_NAMES


# --- commands ---------------------------------------------------------------


def op_exec(req: dict) -> None:
    shell = req.get("shell") or "/bin/sh"
    if not os.path.exists(shell):
        shell = "/bin/sh"
    cwd = req.get("cwd") or WRITABLE_ROOTS[0]
    os.makedirs(cwd, exist_ok=True)
    timeout = float(req.get("timeout") or 600)
    max_output = int(req.get("max_output") or 1_000_000)
    env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
    proc = subprocess.Popen(
        [shell, "-c", req["command"]],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    out = sys.stdout.buffer
    deadline = time.monotonic() + timeout
    total = 0
    timed_out = False
    eof = False
    exited_at = None
    while not eof:
        now = time.monotonic()
        if not timed_out and now >= deadline:
            timed_out = True
            _kill_group(proc.pid)
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        # After the shell exits, a background child may keep the pipe open: stop
        # reading shortly after instead of waiting for it.
        if exited_at is not None and now - exited_at > 1.0:
            break
        wait = 0.2 if exited_at is not None or timed_out else max(0.0, min(1.0, deadline - now))
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            continue
        chunk = os.read(fd, CHUNK)
        if not chunk:
            eof = True
            break
        if total < max_output:
            out.write(chunk[: max_output - total])
            out.flush()
        total += len(chunk)
    if timed_out:
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
    _emit_result(
        {
            "ok": True,
            "exit_code": code,
            "timed_out": timed_out,
            "truncated": total > max_output,
            "total_bytes": total,
        }
    )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


# --- files ------------------------------------------------------------------


def _regular_file(real: str, shown: str) -> os.stat_result:
    try:
        info = os.stat(real)
    except FileNotFoundError:
        raise AgentError("not_found", f"no such file: {shown}") from None
    except NotADirectoryError:
        raise AgentError("not_found", f"no such file: {shown}") from None
    if stat.S_ISDIR(info.st_mode):
        raise AgentError("is_dir", f"{shown} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise AgentError("not_file", f"{shown} is not a regular file")
    return info


def op_read(req: dict) -> None:
    path = req["path"]
    real = resolve(path)
    info = _regular_file(real, path)
    max_bytes = int(req["max_bytes"])
    start = req.get("start_line")
    end = req.get("end_line")
    out = sys.stdout.buffer
    truncated = False
    if start is None and end is None:
        if info.st_size > max_bytes and not req.get("allow_truncate"):
            raise AgentError(
                "too_large",
                f"{path} is {info.st_size} bytes, over the {max_bytes} byte limit",
            )
        remaining = max_bytes
        with open(real, "rb") as handle:
            while remaining > 0:
                chunk = handle.read(min(CHUNK, remaining))
                if not chunk:
                    break
                out.write(chunk)
                remaining -= len(chunk)
        truncated = info.st_size > max_bytes
    else:
        first = max(1, int(start or 1))
        last = int(end) if end is not None else None
        written = 0
        with open(real, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                if number < first:
                    continue
                if last is not None and number > last:
                    break
                if written + len(line) > max_bytes:
                    out.write(line[: max_bytes - written])
                    truncated = True
                    break
                out.write(line)
                written += len(line)
    _emit_result({"ok": True, "size": info.st_size, "truncated": truncated})


def _read_exact_stdin(size: int, sink) -> int:
    """Read exactly ``size`` bytes of stdin into ``sink`` (or discard with None).

    Always through ``sys.stdin.buffer``: the bootstrap read this program from it,
    and its buffer may already hold the bytes that follow.
    """
    stream = sys.stdin.buffer
    remaining = size
    while remaining > 0:
        chunk = stream.read(min(CHUNK, remaining))
        if not chunk:
            break
        if sink is not None:
            sink.write(chunk)
        remaining -= len(chunk)
    return size - remaining


def op_write(req: dict) -> None:
    path = req["path"]
    size = int(req["size"])
    append = bool(req.get("append"))
    try:
        real = resolve(path, WRITABLE_ROOTS)
    except AgentError as exc:
        _read_exact_stdin(size, None)
        if exc.kind == "path" and _within(os.path.normpath(path), READ_ONLY_ROOTS):
            raise AgentError("read_only", f"{path} is read-only") from None
        raise
    if os.path.isdir(real):
        _read_exact_stdin(size, None)
        raise AgentError("is_dir", f"{path} is a directory, not a file")
    parent = os.path.dirname(real)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        _read_exact_stdin(size, None)
        raise AgentError("os", f"cannot create the directory of {path}: {exc.strerror}") from None
    if append:
        with open(real, "ab") as handle:
            got = _read_exact_stdin(size, handle)
    else:
        temp = os.path.join(parent, f".{os.path.basename(real)}.deerflow-{os.getpid()}.tmp")
        try:
            with open(temp, "wb") as handle:
                got = _read_exact_stdin(size, handle)
            if got == size:
                os.replace(temp, real)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
    if got != size:
        raise AgentError("short_write", f"received {got} of {size} bytes for {path}")
    _emit_result({"ok": True, "written": got})


# --- listing and searching ---------------------------------------------------


def _directory(path: str) -> str:
    real = resolve(path)
    if not os.path.exists(real):
        raise AgentError("not_found", f"no such directory: {path}")
    if not os.path.isdir(real):
        raise AgentError("not_dir", f"{path} is not a directory")
    return real


def _entry_name(real: str) -> str:
    return real + "/" if os.path.isdir(real) else real


def op_list(req: dict) -> None:
    base = _directory(req["path"])
    max_depth = max(1, int(req.get("max_depth") or 2))
    entries: list[str] = []

    def walk(directory: str, depth: int) -> None:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return
        for name in names:
            if _ignored(name) or len(entries) >= MAX_LIST_ENTRIES:
                continue
            full = os.path.join(directory, name)
            if os.path.islink(full) and _within(os.path.realpath(full), ALL_ROOTS) is None:
                entries.append(full)
                continue
            entries.append(_entry_name(full))
            if depth < max_depth and os.path.isdir(full) and not os.path.islink(full):
                walk(full, depth + 1)

    walk(base, 1)
    sys.stdout.write(json.dumps(sorted(entries)))
    _emit_result({"ok": True, "count": len(entries)})


def _walk_files(base: str):
    for directory, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not _ignored(d))
        for name in sorted(filenames):
            if _ignored(name):
                continue
            full = os.path.join(directory, name)
            if _within(os.path.realpath(full), ALL_ROOTS) is None:
                continue
            yield full


def op_glob(req: dict) -> None:
    base = _directory(req["path"])
    pattern = req["pattern"]
    if pattern.startswith("/"):
        if not (pattern + "/").startswith(base.rstrip("/") + "/"):
            raise AgentError("path", "glob pattern is outside {}: {}".format(req["path"], pattern))
        pattern = pattern[len(base) :].lstrip("/") or "*"
    if ".." in pattern.split("/"):
        raise AgentError("path", f"glob pattern may not contain '..': {pattern}")
    max_results = int(req.get("max_results") or 1000)
    regex = _glob_regex(pattern)
    matches = []
    for directory, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not _ignored(d))
        relative_dir = os.path.relpath(directory, base)
        for name in sorted(dirnames) + sorted(f for f in filenames if not _ignored(f)):
            relative = name if relative_dir == "." else relative_dir + "/" + name
            if regex.match(relative):
                full = os.path.join(directory, name)
                if _within(os.path.realpath(full), ALL_ROOTS) is not None:
                    matches.append(full)
    matches = sorted(matches)[:max_results]
    sys.stdout.write(json.dumps(matches))
    _emit_result({"ok": True, "count": len(matches)})


def _glob_regex(pattern: str):
    """A regex for a ``**``-aware glob over '/'-separated relative paths."""
    parts = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**/", index):
            parts.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            parts.append(".*")
            index += 2
        elif char == "*":
            parts.append("[^/]*")
            index += 1
        elif char == "?":
            parts.append("[^/]")
            index += 1
        elif char == "[":
            close = pattern.find("]", index + 1)
            if close == -1:
                parts.append(re.escape(char))
                index += 1
            else:
                body = pattern[index + 1 : close]
                if body.startswith("!"):
                    body = "^" + body[1:]
                parts.append("[" + body.replace("\\", "\\\\") + "]")
                index = close + 1
        else:
            parts.append(re.escape(char))
            index += 1
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def op_grep(req: dict) -> None:
    path = req["path"]
    real = resolve(path)
    if not os.path.exists(real):
        raise AgentError("not_found", f"no such file or directory: {path}")
    pattern = req["pattern"]
    if req.get("literal"):
        pattern = re.escape(pattern)
    flags = 0 if req.get("case_sensitive") else re.IGNORECASE
    try:
        regex = re.compile(pattern, flags)
    except re.error as exc:
        raise AgentError("invalid_pattern", f"invalid regular expression: {exc}") from None
    file_glob = req.get("glob")
    max_results = max(1, int(req.get("max_results") or 100))
    files = [real] if os.path.isfile(real) else sorted(_walk_files(real))
    matches = []
    for full in files:
        if file_glob:
            relative = (
                os.path.relpath(full, real) if os.path.isdir(real) else os.path.basename(full)
            )
            target = relative if "/" in file_glob else os.path.basename(full)
            if not fnmatch.fnmatchcase(target, file_glob):
                continue
        try:
            if os.path.getsize(full) > MAX_GREP_FILE_BYTES:
                continue
            with open(full, "rb") as handle:
                head = handle.read(8192)
                if b"\x00" in head:
                    continue
                handle.seek(0)
                for number, raw in enumerate(handle, start=1):
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if regex.search(line):
                        matches.append([full, number, line[:MAX_GREP_LINE]])
                        if len(matches) >= max_results:
                            break
        except OSError:
            continue
        if len(matches) >= max_results:
            break
    sys.stdout.write(json.dumps(matches))
    _emit_result({"ok": True, "count": len(matches)})


OPS = {
    "exec": op_exec,
    "read": op_read,
    "write": op_write,
    "list": op_list,
    "glob": op_glob,
    "grep": op_grep,
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
        message = "{}{}".format(exc.strerror or exc, (": " + where) if where else "")
        _emit_result({"ok": False, "kind": kind, "message": message})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
