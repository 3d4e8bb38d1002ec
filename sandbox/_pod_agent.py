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
import select
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

from sandbox._fileops import (
    READ_FLAGS,
    Deadline,
    FileOpsError,
    Root,
    append_chunks,
    check_pattern,
    compile_search,
    glob_paths,
    glob_to_regex,
    grep_files,
    is_regular_file,
    list_entries,
    open_file,
    read_text_bytes,
    replace_chunks,
)

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
COMMAND_MARK = "DEERFLOW_COMMAND"
MAX_LIST_ENTRIES = 1000
MAX_GLOB_RESULTS = 1000
DEFAULT_SEARCH_SECONDS = 10.0

# An error the provider turns into a SandboxError (``path`` kinds: SandboxPathError).
AgentError = FileOpsError


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


def _root(root: str) -> Root:
    """The shared file operations' view of a virtual root in the pod."""
    if root.startswith(USER_DATA + "/"):
        return Root(root, USER_DATA, (root[len(USER_DATA) + 1 :],))
    return Root(root, root)


def _resolve(path: str) -> tuple:
    root, parts = split_virtual(path)
    return _root(root), parts


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


def _reap_marked(mark: bytes) -> None:
    """SIGKILL every process whose environment carries ``mark`` (setsid, double forks)."""
    for _ in range(3):  # a process may fork while we look: look again
        found = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    environ = handle.read()
            except OSError:
                continue
            if mark in environ.split(b"\0"):
                found = True
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGKILL)
        if not found:
            return


_RLIMITS = (
    ("RLIMIT_AS", "max_memory_bytes"),
    ("RLIMIT_CPU", "max_cpu_seconds"),
    ("RLIMIT_FSIZE", "max_file_bytes"),
    ("RLIMIT_NOFILE", "max_open_files"),
)


def _limiter(limits: dict):
    """A ``preexec_fn`` applying the command's rlimits (this helper is single-threaded)."""
    import resource

    def apply() -> None:
        for name, key in _RLIMITS:
            value = int(limits.get(key) or 0)
            if value:
                hard = value + 1 if name == "RLIMIT_CPU" else value
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(getattr(resource, name), (value, hard))

    return apply


def op_exec(req: dict) -> None:
    shell = req.get("shell") or "/bin/sh"
    if not os.path.exists(shell):
        shell = "/bin/sh"
    os.makedirs(WORKSPACE, exist_ok=True)
    timeout = float(req.get("timeout") or 300)
    env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
    # Every process the command starts inherits this mark (unless it clears its
    # environment), so what escaped the process group can still be found.
    mark = f"{COMMAND_MARK}={os.getpid()}-{time.monotonic_ns()}"
    env[COMMAND_MARK] = mark.split("=", 1)[1]
    proc = subprocess.Popen(
        [shell, "-c", req["command"]],
        cwd=WORKSPACE,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
        preexec_fn=_limiter(req.get("limits") or {}),
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
    # Nothing outlives its command: the group, then anything carrying the mark.
    _kill_group(proc.pid)
    _reap_marked(mark.encode())
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

    def chunks(self):
        """The rest of the payload, chunk by chunk."""
        stream = sys.stdin.buffer
        while self.remaining > 0:
            chunk = stream.read(min(CHUNK, self.remaining))
            if not chunk:
                return
            self.remaining -= len(chunk)
            yield chunk

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
    root, parts = _resolve(req["path"])
    max_bytes = int(req["max_bytes"])
    if req.get("mode") == "bytes":
        with os.fdopen(open_file(root, parts, READ_FLAGS), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                raise AgentError(
                    "too_large",
                    f"{root.display(parts)}: file is {size} bytes, more than the "
                    f"{max_bytes}-byte limit",
                )
            total = 0
            while True:
                chunk = handle.read(min(CHUNK, max_bytes + 1 - total))
                if not chunk:
                    break
                total += len(chunk)
                if total > max_bytes:
                    raise AgentError(
                        "too_large",
                        f"{root.display(parts)}: file grew past the {max_bytes}-byte limit",
                    )
                sys.stdout.buffer.write(chunk)
        _emit_result({"ok": True, "size": total})
        return
    start, end = req.get("start_line"), req.get("end_line")
    data = read_text_bytes(
        root,
        parts,
        None if start is None else int(start),
        None if end is None else int(end),
        max_bytes,
    )
    sys.stdout.buffer.write(data)
    _emit_result({"ok": True, "size": len(data)})


def op_write(req: dict) -> None:
    size = int(req["size"])
    payload = _Payload(size)
    try:
        virtual, parts = split_virtual(req["path"])
        if virtual in READ_ONLY_ROOTS:
            raise AgentError("read_only", f"{_shown(virtual, parts)}: {virtual} is read-only")
        root = _root(virtual)
        if req.get("append"):
            got = append_chunks(root, parts, payload.chunks())
        else:
            got = replace_chunks(root, parts, payload.chunks(), expected=size)
    except BaseException:
        payload.copy_to(None)  # consume what the client still sends, then report
        raise
    if got != size:
        raise AgentError("short_write", f"received {got} of {size} bytes for {req['path']}")
    _emit_result({"ok": True, "written": got})


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
        root, parts = _resolve(req["path"])
        result = is_regular_file(root, parts)
    sys.stdout.write(json.dumps(result))
    _emit_result({"ok": True})


# --- listing and searching --------------------------------------------------------


def glob_regex(pattern: str):
    """A regex for a ``**``-aware glob over '/'-separated relative paths."""
    return glob_to_regex(pattern)


def op_list(req: dict) -> None:
    root, parts = _resolve(req["path"])
    max_depth = min(max(int(req.get("max_depth") or 2), 1), 5)
    entries = list_entries(root, parts, max_depth, MAX_LIST_ENTRIES)
    sys.stdout.write(json.dumps(entries))
    _emit_result({"ok": True, "count": len(entries)})


def op_glob(req: dict) -> None:
    root, parts = _resolve(req["path"])
    pattern = check_pattern(req["pattern"])
    with Deadline(req.get("timeout") or DEFAULT_SEARCH_SECONDS, "glob") as deadline:
        matches = glob_paths(root, parts, pattern, MAX_GLOB_RESULTS, deadline)
    sys.stdout.write(json.dumps(matches))
    _emit_result({"ok": True, "count": len(matches)})


def op_grep(req: dict) -> None:
    root, parts = _resolve(req["path"])
    regex = compile_search(
        req["pattern"], bool(req.get("literal")), bool(req.get("case_sensitive"))
    )
    file_glob = req.get("glob")
    if file_glob is not None:
        check_pattern(file_glob)
    max_results = max(1, int(req.get("max_results") or 100))
    with Deadline(req.get("timeout") or DEFAULT_SEARCH_SECONDS, "grep") as deadline:
        matches = grep_files(
            root, parts, regex, file_glob, max_results, int(req["max_bytes"]), deadline
        )
    sys.stdout.write(json.dumps([list(match) for match in matches]))
    _emit_result({"ok": True, "count": len(matches)})


# --- shipping ----------------------------------------------------------------------

_BUNDLE_PRELUDE = """import sys, types
_fileops = types.ModuleType("sandbox._fileops")
sys.modules["sandbox._fileops"] = _fileops
exec(compile(%r, "deerflow_fileops", "exec"), _fileops.__dict__)
exec(compile(%r, "deerflow_pod_agent", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


def bundle() -> bytes:
    """This helper and the shared file operations as one zlib-compressed program.

    The provider sends it on stdin to the exec's bootstrap; in the pod the
    file-operation module is registered as ``sandbox._fileops`` before this
    helper runs, so the helper's import finds it without any file.
    """
    here = Path(__file__).resolve()
    fileops = (here.parent / "_fileops.py").read_text(encoding="utf-8")
    program = _BUNDLE_PRELUDE % (fileops, here.read_text(encoding="utf-8"))
    return zlib.compress(program.encode("utf-8"), 9)


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
