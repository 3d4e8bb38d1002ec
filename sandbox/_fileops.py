"""The sandbox file operations, once, for every provider (standard library only).

The local provider calls these on the host (through ``sandbox._hostfs``, which
turns ``FileOpsError`` into ``SandboxError``); the Kubernetes provider ships
this module to the pod together with its helper (``sandbox._pod_agent``) and
the helper calls the same functions there. So walking, reading, writing,
listing, globbing and searching follow one implementation of the contract in
``sandbox/base.py``. It must stay self-contained and run on Python 3.8+.

The rules every operation keeps:

- Every path is walked one component at a time from a trusted base directory
  with ``openat``-style calls (``dir_fd``) and ``O_NOFOLLOW``: a symbolic link
  anywhere is refused, never followed, and swapping a directory for a link
  between a check and a use does not help (there is no separate check).
- A regular file with more than one hard link is refused (read, append,
  replace) and skipped by searches: a link planted by a command may point at
  a file outside the sandbox's tree.
- Searches (``grep_files``) stop at a deadline: in a process's main thread a
  timer interrupts even a regular expression that backtracks forever (the
  ``re`` engine checks for signals), elsewhere the deadline is checked
  between lines. Callers that must not block (the server's event loop) run
  searches in a separate process (``python -I -S _fileops.py --serve``,
  JSON requests and replies by line; see ``main``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import stat
import sys
import threading
import time
from dataclasses import dataclass

BINARY_SNIFF_BYTES = 8192
MAX_GREP_LINE = 500
CHUNK = 1024 * 1024
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class FileOpsError(Exception):
    """An operation failed for a reason the model can be told about.

    ``kind``: ``path`` (escape, link, bad path), ``read_only``, ``not_found``,
    ``is_dir``, ``not_dir``, ``not_file``, ``hard_link``, ``binary``,
    ``too_large``, ``invalid_pattern``, ``timeout``, ``os``.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Root:
    """A virtual root: a trusted ``base`` directory plus components walked without links."""

    virtual: str
    base: str | os.PathLike[str]
    chain: tuple[str, ...] = ()

    def display(self, parts: tuple) -> str:
        return "/".join((self.virtual, *parts)) if parts else self.virtual


# --- walking ----------------------------------------------------------------------


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _step(dir_fd: int, name: str, create: bool, shown: str) -> int:
    """Open directory ``name`` below ``dir_fd`` (closing ``dir_fd``)."""
    try:
        try:
            return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create:
                raise FileOpsError("not_found", f"{shown}: no such file or directory") from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=dir_fd)
            return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(dir_fd, name):
                raise FileOpsError(
                    "path",
                    f"{shown}: a symbolic link is in the path; sandbox file tools do not follow links",
                ) from None
            if exc.errno == errno.ENOTDIR:
                raise FileOpsError("not_dir", f"{shown}: not a directory") from None
            raise FileOpsError("os", f"{shown}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


def open_dir(root: Root, parts: tuple, create: bool = False) -> int:
    """A descriptor of ``root``/``parts`` (a directory), every component walked without links."""
    try:
        fd = os.open(root.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise FileOpsError("not_found", f"{root.virtual}: no such file or directory") from None
        os.makedirs(root.base, exist_ok=True)
        fd = os.open(root.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise FileOpsError("os", f"{root.virtual}: {exc.strerror}") from None
    for index, name in enumerate((*root.chain, *parts)):
        shown = root.display(parts[: max(0, index - len(root.chain) + 1)])
        fd = _step(fd, name, create, shown)
    return fd


def ensure_dirs(root: Root) -> None:
    os.close(open_dir(root, (), create=True))


def _refuse_hard_link(info: os.stat_result, shown: str) -> None:
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        raise FileOpsError(
            "hard_link",
            f"{shown}: has {info.st_nlink} hard links; sandbox file tools refuse hard-linked "
            "files (copy it with bash first: `cp --no-preserve=links`)",
        )


def open_file(root: Root, parts: tuple, flags: int, create_parents: bool = False) -> int:
    """A descriptor of a regular, singly linked file (never through a link)."""
    shown = root.display(parts)
    if not parts:
        raise FileOpsError("is_dir", f"{shown}: is a directory")
    dir_fd = open_dir(root, parts[:-1], create=create_parents)
    try:
        try:
            fd = os.open(parts[-1], flags, 0o644, dir_fd=dir_fd)
        except FileNotFoundError:
            raise FileOpsError("not_found", f"{shown}: no such file") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP or _is_link(dir_fd, parts[-1]):
                raise FileOpsError(
                    "path", f"{shown}: is a symbolic link; sandbox file tools do not follow links"
                ) from None
            if exc.errno == errno.EISDIR:
                raise FileOpsError("is_dir", f"{shown}: is a directory") from None
            raise FileOpsError("os", f"{shown}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            if stat.S_ISDIR(info.st_mode):
                raise FileOpsError("is_dir", f"{shown}: is a directory")
            raise FileOpsError("not_file", f"{shown}: is not a regular file")
        _refuse_hard_link(info, shown)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_regular_file(root: Root, parts: tuple) -> bool:
    """A regular file, not a link (hard-linked files count: callers then get a clear error)."""
    if not parts:
        return False
    try:
        dir_fd = open_dir(root, parts[:-1])
    except FileOpsError:
        return False
    try:
        info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(dir_fd)
    return stat.S_ISREG(info.st_mode)


# --- reading ------------------------------------------------------------------------


def read_bytes(root: Root, parts: tuple, max_bytes: int) -> bytes:
    shown = root.display(parts)
    with os.fdopen(open_file(root, parts, READ_FLAGS), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise FileOpsError(
                "too_large", f"{shown}: file is {size} bytes, more than the {max_bytes}-byte limit"
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileOpsError("too_large", f"{shown}: file grew past the {max_bytes}-byte limit")
    return data


def read_head(root: Root, parts: tuple, limit: int) -> bytes:
    with os.fdopen(open_file(root, parts, READ_FLAGS), "rb") as handle:
        return handle.read(limit)


def _bounded_lines(handle, cap: int):
    """Lines of ``handle``; a line longer than ``cap`` is consumed and yielded as None."""
    while True:
        line = handle.readline(cap + 1)
        if not line:
            return
        if len(line) > cap and not line.endswith(b"\n"):
            while True:
                rest = handle.readline(CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None
            continue
        yield line


def read_text_bytes(root: Root, parts: tuple, start_line, end_line, max_bytes: int) -> bytes:
    """The file's bytes (or a 1-based inclusive line range); binaries refused."""
    shown = root.display(parts)
    if start_line is not None and start_line < 1:
        raise FileOpsError("invalid", f"start_line must be >= 1, got {start_line}")
    if end_line is not None and end_line < (start_line or 1):
        raise FileOpsError(
            "invalid", f"end_line ({end_line}) is before start_line ({start_line or 1})"
        )
    with os.fdopen(open_file(root, parts, READ_FLAGS), "rb") as handle:
        head = handle.read(BINARY_SNIFF_BYTES)
        if b"\x00" in head:
            raise FileOpsError(
                "binary",
                f"{shown}: is a binary file; inspect it with bash (e.g. `xxd`, `file`) instead",
            )
        if start_line is None and end_line is None:
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                raise FileOpsError(
                    "too_large",
                    f"{shown}: file is {size} bytes, more than the {max_bytes}-byte limit "
                    "for a whole read; read a line range (start_line/end_line) instead",
                )
            data = head + handle.read(max_bytes + 1 - len(head))
            if len(data) > max_bytes:
                raise FileOpsError(
                    "too_large", f"{shown}: file grew past the {max_bytes}-byte limit"
                )
            return data
        handle.seek(0)
        first = start_line or 1
        collected = []
        total = 0
        for number, line in enumerate(_bounded_lines(handle, max_bytes), start=1):
            if end_line is not None and number > end_line:
                break
            if number < first:
                continue
            total += len(line) if line is not None else max_bytes + 1
            if line is None or total > max_bytes:
                raise FileOpsError(
                    "too_large",
                    f"{shown}: the requested lines exceed the {max_bytes}-byte limit; "
                    "read a smaller range",
                )
            collected.append(line)
        return b"".join(collected)


# --- writing ------------------------------------------------------------------------


def append_chunks(root: Root, parts: tuple, chunks) -> int:
    """Append ``chunks`` (bytes) to the file, creating it and its parents; bytes written."""
    fd = open_file(root, parts, WRITE_FLAGS | os.O_APPEND, create_parents=True)
    written = 0
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                count = os.write(fd, view[:CHUNK])
                view = view[count:]
                written += count
    finally:
        os.close(fd)
    return written


def replace_chunks(root: Root, parts: tuple, chunks, expected=None) -> int:
    """Write ``chunks`` to a temporary file beside the target, then rename over it.

    The target is never written through (a link, or a hard link, stays
    untouched); with ``expected`` set, a short write leaves the target as it was.
    """
    shown = root.display(parts)
    if not parts:
        raise FileOpsError("is_dir", f"{shown}: is a directory")
    name = parts[-1]
    dir_fd = open_dir(root, parts[:-1], create=True)
    temp = f".{name[:200]}.deerflow-{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None:
            if stat.S_ISLNK(info.st_mode):
                raise FileOpsError(
                    "path", f"{shown}: is a symbolic link; sandbox file tools do not follow links"
                )
            if stat.S_ISDIR(info.st_mode):
                raise FileOpsError("is_dir", f"{shown}: is a directory")
            _refuse_hard_link(info, shown)
        fd = os.open(temp, WRITE_FLAGS | os.O_TRUNC | os.O_EXCL, 0o644, dir_fd=dir_fd)
        written = 0
        try:
            os.set_blocking(fd, True)
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    count = os.write(fd, view[:CHUNK])
                    view = view[count:]
                    written += count
        finally:
            os.close(fd)
        if expected is None or written == expected:
            if info is not None:  # keep the replaced file's mode and owner
                with contextlib.suppress(OSError):
                    os.chmod(temp, stat.S_IMODE(info.st_mode), dir_fd=dir_fd)
                with contextlib.suppress(OSError):
                    os.chown(temp, info.st_uid, info.st_gid, dir_fd=dir_fd, follow_symlinks=False)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return written
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        os.close(dir_fd)


# --- listing and searching ------------------------------------------------------------


def walk(dir_fd: int, prefix: tuple, max_depth=None, depth: int = 1):
    """Yield (parent components, name, kind, dir_fd); kind is dir|file|link|other.

    Links are reported, never entered; ``dir_fd`` is valid during the yield only.
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
                child = os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from walk(child, (*prefix, entry.name), max_depth, depth + 1)
            finally:
                os.close(child)


def list_entries(root: Root, parts: tuple, max_depth: int, limit: int) -> list:
    fd = open_dir(root, parts)
    base = root.display(parts)
    result = []
    try:
        for prefix, name, kind, _ in walk(fd, (), max(1, max_depth)):
            suffix = {"dir": "/", "link": "@"}.get(kind, "")
            result.append("/".join((base, *prefix, name)) + suffix)
            if len(result) >= limit:
                break
    finally:
        os.close(fd)
    return result


def check_pattern(pattern) -> str:
    """A glob must be relative to the searched directory and never climb out."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise FileOpsError("invalid_pattern", "glob pattern is empty")
    if pattern.startswith("/") or ".." in pattern.split("/") or "\x00" in pattern:
        raise FileOpsError(
            "path", f"glob pattern {pattern!r} must be relative to `path` and must not contain '..'"
        )
    return pattern


def glob_to_regex(pattern: str):
    """Translate a glob (``*``, ``?``, ``[...]``, ``**``) for ``/``-separated relative paths."""
    out = []
    index = 0
    length = len(pattern)
    while index < length:
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
            end = pattern.find("]", index + 2 if pattern.startswith("[!", index) else index + 1)
            if end == -1:
                out.append(re.escape(char))
                index += 1
                continue
            body = pattern[index + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            index = end + 1
        else:
            out.append(re.escape(char))
            index += 1
    return re.compile("(?s:" + "".join(out) + r")\Z")


class Deadline:
    """Raises ``FileOpsError('timeout')`` once ``seconds`` have passed.

    In the main thread a real-time timer interrupts even a backtracking
    regular expression; ``check()`` covers the rest (and other threads).
    """

    def __init__(self, seconds, what: str) -> None:
        self.seconds = float(seconds) if seconds else 0.0
        self.what = what
        self.end = time.monotonic() + self.seconds if self.seconds else None
        self._armed = False
        self._previous: object = None

    def _expired(self) -> FileOpsError:
        return FileOpsError(
            "timeout",
            f"{self.what} stopped after its {self.seconds:g}-second limit; use a simpler "
            "pattern (nested repetition such as (a+)+ can take forever), literal=true, "
            "or a narrower path/glob",
        )

    def _on_alarm(self, signum, frame) -> None:
        raise self._expired()

    def __enter__(self) -> Deadline:
        if self.end is not None and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self._armed = True
        return self

    def __exit__(self, *exc_info) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            previous = self._previous if callable(self._previous) else signal.SIG_DFL
            signal.signal(signal.SIGALRM, previous)

    def check(self) -> None:
        if self.end is not None and time.monotonic() > self.end:
            raise self._expired()


def glob_paths(root: Root, parts: tuple, pattern: str, limit: int, deadline=None) -> list:
    matcher = glob_to_regex(check_pattern(pattern))
    fd = open_dir(root, parts)
    base = root.display(parts)
    result = []
    try:
        for prefix, name, kind, _ in walk(fd, (), None):
            if deadline is not None:
                deadline.check()
            relative = "/".join((*prefix, name))
            if matcher.match(relative):
                result.append(f"{base}/{relative}" + ("/" if kind == "dir" else ""))
                if len(result) >= limit:
                    break
    finally:
        os.close(fd)
    return result


def compile_search(pattern, literal: bool, case_sensitive: bool):
    if not isinstance(pattern, str) or pattern == "":
        raise FileOpsError("invalid_pattern", "pattern is empty")
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        return re.compile(re.escape(pattern) if literal else pattern, flags)
    except re.error as exc:
        raise FileOpsError(
            "invalid_pattern",
            f"invalid regular expression {pattern!r}: {exc}; pass literal=true to search text",
        ) from None


def _grep_one(dir_fd: int, name: str, regex, shown: str, max_bytes: int, limit: int, deadline):
    found: list = []
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return found
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes or info.st_nlink > 1:
            return found
        os.set_blocking(handle.fileno(), True)
        if b"\x00" in handle.read(BINARY_SNIFF_BYTES):
            return found
        handle.seek(0)
        for number, raw in enumerate(handle, start=1):
            if deadline is not None and number % 256 == 0:
                deadline.check()
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if regex.search(line):
                found.append((shown, number, line[:MAX_GREP_LINE]))
                if len(found) >= limit:
                    break
    return found


def grep_files(
    root: Root,
    parts: tuple,
    regex,
    file_glob,
    max_results: int,
    max_file_bytes: int,
    deadline=None,
) -> list:
    """(path, line number, line) of matches in regular files below ``parts`` (or that file).

    Binaries, hard-linked files and files above ``max_file_bytes`` are skipped.
    """
    name_matcher = glob_to_regex(check_pattern(file_glob)) if file_glob is not None else None
    if parts and is_regular_file(root, parts):
        dir_fd = open_dir(root, parts[:-1])
        try:
            return _grep_one(
                dir_fd, parts[-1], regex, root.display(parts), max_file_bytes, max_results, deadline
            )
        finally:
            os.close(dir_fd)
    results: list = []
    fd = open_dir(root, parts)
    base = root.display(parts)
    try:
        for prefix, name, kind, dir_fd in walk(fd, (), None):
            if deadline is not None:
                deadline.check()
            if kind != "file":
                continue
            relative = "/".join((*prefix, name))
            if name_matcher and not (name_matcher.match(name) or name_matcher.match(relative)):
                continue
            results.extend(
                _grep_one(
                    dir_fd,
                    name,
                    regex,
                    f"{base}/{relative}",
                    max_file_bytes,
                    max_results - len(results),
                    deadline,
                )
            )
            if len(results) >= max_results:
                break
    finally:
        os.close(fd)
    return results


# --- a search in its own process --------------------------------------------------------


def search(request: dict) -> list:
    """Run one ``grep`` or ``glob`` request (the same fields as the pod helper's)."""
    root = Root(request["virtual"], request["base"], tuple(request.get("chain") or ()))
    parts = tuple(request.get("parts") or ())
    with Deadline(request.get("timeout"), request["op"]) as deadline:
        if request["op"] == "glob":
            return glob_paths(root, parts, request["pattern"], int(request["limit"]), deadline)
        regex = compile_search(
            request["pattern"], bool(request.get("literal")), bool(request.get("case_sensitive"))
        )
        return grep_files(
            root,
            parts,
            regex,
            request.get("glob"),
            int(request["max_results"]),
            int(request["max_bytes"]),
            deadline,
        )


def _reply(request_text: str) -> dict:
    try:
        return {"ok": True, "result": search(json.loads(request_text))}
    except FileOpsError as exc:
        return {"ok": False, "kind": exc.kind, "message": exc.message}
    except OSError as exc:
        return {"ok": False, "kind": "os", "message": str(exc.strerror or exc)}
    except (ValueError, KeyError, TypeError) as exc:
        return {"ok": False, "kind": "protocol", "message": f"bad search request: {exc}"}


def main(argv: list) -> int:
    """``python -I -S _fileops.py [--serve]``: JSON search requests on stdin, replies on stdout.

    Without ``--serve``: one request (all of stdin), one reply. With it: one
    request per line until end of input, one reply line each (a worker the
    server reuses, and kills if a search overruns its own timer).
    """
    if "--serve" not in argv:
        sys.stdout.write(json.dumps(_reply(sys.stdin.read())))
        sys.stdout.flush()
        return 0
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(_reply(line)) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
