"""Host filesystem operations that never follow a symbolic link.

Every path is walked one component at a time from a trusted base directory
with ``openat``-style calls (``dir_fd``) and ``O_NOFOLLOW``, so a link planted
anywhere below the base (by a command, for example) is refused rather than
followed, and swapping a directory for a link between a check and a use does
not help: there is no separate check. All functions are blocking; callers run
them in a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sandbox.base import GrepMatch, SandboxError, SandboxNotFoundError, SandboxPathError

__all__ = [
    "BINARY_SNIFF_BYTES",
    "HostRoot",
    "ensure_dirs",
    "glob_paths",
    "give_to",
    "glob_to_regex",
    "grep_files",
    "is_regular_file",
    "list_entries",
    "open_dir",
    "read_bytes",
    "read_head",
    "read_text",
    "write_bytes",
]

BINARY_SNIFF_BYTES = 8192
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class HostRoot:
    """A virtual root on the host: a trusted ``base`` plus components walked without links."""

    virtual: str
    base: Path
    chain: tuple[str, ...] = ()

    def display(self, parts: tuple[str, ...]) -> str:
        return "/".join((self.virtual, *parts)) if parts else self.virtual


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _step(dir_fd: int, name: str, *, create: bool, shown: str) -> int:
    """Open directory ``name`` below ``dir_fd`` (closing ``dir_fd``)."""
    try:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create:
                raise SandboxNotFoundError(f"{shown}: no such file or directory") from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=dir_fd)
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(dir_fd, name):
                raise SandboxPathError(
                    f"{shown}: a symbolic link is in the path; sandbox file tools do not follow links"
                ) from None
            if exc.errno == errno.ENOTDIR:
                raise SandboxError(f"{shown}: not a directory") from None
            raise SandboxError(f"{shown}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


def open_dir(root: HostRoot, parts: tuple[str, ...], *, create: bool = False) -> int:
    try:
        fd = os.open(root.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise SandboxNotFoundError(f"{root.virtual}: no such file or directory") from None
        root.base.mkdir(parents=True, exist_ok=True)
        fd = os.open(root.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(f"{root.virtual}: {exc.strerror}") from None
    for index, name in enumerate((*root.chain, *parts)):
        shown = root.display(parts[: max(0, index - len(root.chain) + 1)])
        fd = _step(fd, name, create=create, shown=shown)
    return fd


def ensure_dirs(root: HostRoot) -> None:
    os.close(open_dir(root, (), create=True))


def _open_file(root: HostRoot, parts: tuple[str, ...], flags: int, *, create_parents: bool) -> int:
    shown = root.display(parts)
    if not parts:
        raise SandboxError(f"{shown}: is a directory")
    dir_fd = open_dir(root, parts[:-1], create=create_parents)
    try:
        try:
            fd = os.open(parts[-1], flags, 0o644, dir_fd=dir_fd)
        except FileNotFoundError:
            raise SandboxNotFoundError(f"{shown}: no such file") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP or _is_link(dir_fd, parts[-1]):
                raise SandboxPathError(
                    f"{shown}: is a symbolic link; sandbox file tools do not follow links"
                ) from None
            if exc.errno == errno.EISDIR:
                raise SandboxError(f"{shown}: is a directory") from None
            raise SandboxError(f"{shown}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise SandboxError(f"{shown}: is {kind}")
    return fd


def read_bytes(root: HostRoot, parts: tuple[str, ...], *, max_bytes: int) -> bytes:
    fd = _open_file(root, parts, _READ_FLAGS, create_parents=False)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise SandboxError(
                f"{root.display(parts)}: file is {size} bytes, more than the {max_bytes}-byte limit"
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SandboxError(f"{root.display(parts)}: file grew past the {max_bytes}-byte limit")
    return data


def read_text(
    root: HostRoot,
    parts: tuple[str, ...],
    *,
    start_line: int | None,
    end_line: int | None,
    max_bytes: int,
) -> str:
    """Text of the file (or a 1-based inclusive line range), binary refused."""
    shown = root.display(parts)
    if start_line is not None and start_line < 1:
        raise SandboxError(f"start_line must be >= 1, got {start_line}")
    if end_line is not None and end_line < (start_line or 1):
        raise SandboxError(f"end_line ({end_line}) is before start_line ({start_line or 1})")
    fd = _open_file(root, parts, _READ_FLAGS, create_parents=False)
    with os.fdopen(fd, "rb") as handle:
        head = handle.read(BINARY_SNIFF_BYTES)
        if b"\x00" in head:
            raise SandboxError(
                f"{shown}: is a binary file; inspect it with bash (e.g. `xxd`, `file`) instead"
            )
        ranged = start_line is not None or end_line is not None
        if not ranged:
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                raise SandboxError(
                    f"{shown}: file is {size} bytes, more than the {max_bytes}-byte limit "
                    "for a whole read; read a line range (start_line/end_line) instead"
                )
            data = head + handle.read(max_bytes + 1 - len(head))
            if len(data) > max_bytes:
                raise SandboxError(f"{shown}: file grew past the {max_bytes}-byte limit")
            return data.decode("utf-8", errors="replace")
        handle.seek(0)
        first = start_line or 1
        collected: list[bytes] = []
        total = 0
        for number, line in enumerate(_bounded_lines(handle, max_bytes), start=1):
            if end_line is not None and number > end_line:
                break
            if number < first:
                continue
            total += len(line) if line is not None else max_bytes + 1
            if line is None or total > max_bytes:
                raise SandboxError(
                    f"{shown}: the requested lines exceed the {max_bytes}-byte limit; "
                    "read a smaller range"
                )
            collected.append(line)
        return b"".join(collected).decode("utf-8", errors="replace")


def _bounded_lines(handle: BinaryIO, cap: int) -> Iterator[bytes | None]:
    """Lines of ``handle``; a line longer than ``cap`` is consumed and yielded as None."""
    while True:
        line = handle.readline(cap + 1)
        if not line:
            return
        if len(line) > cap and not line.endswith(b"\n"):
            while True:
                rest = handle.readline(_CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None
            continue
        yield line


def read_head(root: HostRoot, parts: tuple[str, ...], limit: int) -> bytes:
    """The first ``limit`` bytes of a regular file."""
    fd = _open_file(root, parts, _READ_FLAGS, create_parents=False)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit)


def write_bytes(root: HostRoot, parts: tuple[str, ...], data: bytes, *, append: bool) -> None:
    fd = _open_file(root, parts, _WRITE_FLAGS | (os.O_APPEND if append else 0), create_parents=True)
    try:
        os.set_blocking(fd, True)
        if not append:
            os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            written = os.write(fd, view[:_CHUNK])
            view = view[written:]
    finally:
        os.close(fd)


def give_to(root: HostRoot, parts: tuple[str, ...], uid: int, gid: int) -> None:
    """Chown each root-owned component of ``parts`` (never through a link) to ``uid:gid``.

    The server, running as root, hands what it writes to the sandbox's
    unprivileged user so that user's commands can change it.
    """
    for index in range(len(parts)):
        dir_fd = open_dir(root, parts[:index])
        try:
            info = os.stat(parts[index], dir_fd=dir_fd, follow_symlinks=False)
            if info.st_uid == 0 and not stat.S_ISLNK(info.st_mode):
                os.chown(parts[index], uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        finally:
            os.close(dir_fd)


def is_regular_file(root: HostRoot, parts: tuple[str, ...]) -> bool:
    if not parts:
        return False
    try:
        dir_fd = open_dir(root, parts[:-1])
    except SandboxError:
        return False
    try:
        info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(dir_fd)
    return stat.S_ISREG(info.st_mode)


def _scan(dir_fd: int) -> list[os.DirEntry[str]]:
    with os.scandir(dir_fd) as entries:
        return sorted(entries, key=lambda entry: entry.name)


def _walk(
    dir_fd: int, prefix: tuple[str, ...], max_depth: int | None, depth: int = 1
) -> Iterator[tuple[tuple[str, ...], str, str, int]]:
    """Yield (parent components, name, kind, dir_fd); kind is dir|file|link|other.

    Links are reported, never entered; ``dir_fd`` is valid during the yield only.
    """
    for entry in _scan(dir_fd):
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


def list_entries(
    root: HostRoot, parts: tuple[str, ...], *, max_depth: int, limit: int
) -> list[str]:
    fd = open_dir(root, parts)
    base = root.display(parts)
    result: list[str] = []
    try:
        for prefix, name, kind, _ in _walk(fd, (), max(1, max_depth)):
            suffix = {"dir": "/", "link": "@"}.get(kind, "")
            result.append("/".join((base, *prefix, name)) + suffix)
            if len(result) >= limit:
                break
    finally:
        os.close(fd)
    return result


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob (``*``, ``?``, ``[...]``, ``**``) for ``/``-separated relative paths."""
    out: list[str] = []
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
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            index = end + 1
        else:
            out.append(re.escape(char))
            index += 1
    return re.compile("(?s:" + "".join(out) + r")\Z")


def glob_paths(root: HostRoot, parts: tuple[str, ...], pattern: str, *, limit: int) -> list[str]:
    matcher = glob_to_regex(pattern)
    fd = open_dir(root, parts)
    base = root.display(parts)
    result: list[str] = []
    try:
        for prefix, name, kind, _ in _walk(fd, (), None):
            relative = "/".join((*prefix, name))
            if matcher.match(relative):
                result.append(f"{base}/{relative}" + ("/" if kind == "dir" else ""))
                if len(result) >= limit:
                    break
    finally:
        os.close(fd)
    return result


def _grep_one(
    dir_fd: int, name: str, regex: re.Pattern[str], shown: str, max_bytes: int, limit: int
) -> Iterator[GrepMatch]:
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return
        if b"\x00" in handle.read(BINARY_SNIFF_BYTES):
            return
        handle.seek(0)
        found = 0
        for number, raw in enumerate(handle, start=1):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if regex.search(line):
                yield GrepMatch(path=shown, line_number=number, line=line[:500])
                found += 1
                if found >= limit:
                    return


def grep_files(
    root: HostRoot,
    parts: tuple[str, ...],
    regex: re.Pattern[str],
    *,
    file_glob: str | None,
    max_results: int,
    max_file_bytes: int,
) -> list[GrepMatch]:
    """Search regular files below ``parts`` (or that single file); binaries skipped."""
    name_matcher = glob_to_regex(file_glob) if file_glob else None
    results: list[GrepMatch] = []
    if parts and is_regular_file(root, parts):
        dir_fd = open_dir(root, parts[:-1])
        try:
            results.extend(
                _grep_one(
                    dir_fd, parts[-1], regex, root.display(parts), max_file_bytes, max_results
                )
            )
        finally:
            os.close(dir_fd)
        return results
    fd = open_dir(root, parts)
    base = root.display(parts)
    try:
        for prefix, name, kind, dir_fd in _walk(fd, (), None):
            if kind != "file":
                continue
            relative = "/".join((*prefix, name))
            if name_matcher and not (name_matcher.match(name) or name_matcher.match(relative)):
                continue
            remaining = max_results - len(results)
            results.extend(
                _grep_one(dir_fd, name, regex, f"{base}/{relative}", max_file_bytes, remaining)
            )
            if len(results) >= max_results:
                break
    finally:
        os.close(fd)
    return results
