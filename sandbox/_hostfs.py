"""Host filesystem operations for the server: ``sandbox._fileops`` with sandbox errors.

``_fileops`` holds the one implementation of the file contract (the
Kubernetes helper runs the same module in the pod); this adapter turns its
``FileOpsError`` into the ``SandboxError`` family and adds what only the host
needs (handing files to the sandbox's user, searches in a separate process).
All functions are blocking; callers run them in a worker thread
(``asyncio.to_thread``), except ``search_in_subprocess`` which is async.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import stat
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from sandbox import _fileops
from sandbox._fileops import BINARY_SNIFF_BYTES, Root, glob_to_regex
from sandbox.base import GrepMatch, SandboxError, SandboxNotFoundError, SandboxPathError

__all__ = [
    "BINARY_SNIFF_BYTES",
    "HostRoot",
    "ensure_dirs",
    "give_to",
    "glob_paths",
    "glob_to_regex",
    "grep_files",
    "is_regular_file",
    "list_entries",
    "open_dir",
    "read_bytes",
    "read_head",
    "read_text",
    "search_in_subprocess",
    "to_sandbox_error",
    "write_bytes",
]

HostRoot = Root
_P = ParamSpec("_P")
_T = TypeVar("_T")
_FILEOPS_PROGRAM = Path(_fileops.__file__)
# Beyond its own timer, how long a search process may take before it is killed.
_KILL_GRACE_SECONDS = 2.0
_MAX_IDLE_WORKERS = 4
_MAX_REPLY_BYTES = 32 * 1024 * 1024


def to_sandbox_error(kind: str, message: str) -> SandboxError:
    if kind in ("path", "read_only"):
        return SandboxPathError(message)
    if kind == "not_found":
        return SandboxNotFoundError(message)
    return SandboxError(message)


def _translated(function: Callable[_P, _T]) -> Callable[_P, _T]:
    @functools.wraps(function)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return function(*args, **kwargs)
        except _fileops.FileOpsError as exc:
            raise to_sandbox_error(exc.kind, exc.message) from None

    return call


open_dir = _translated(_fileops.open_dir)
ensure_dirs = _translated(_fileops.ensure_dirs)
is_regular_file = _translated(_fileops.is_regular_file)
read_bytes = _translated(_fileops.read_bytes)
read_head = _translated(_fileops.read_head)
list_entries = _translated(_fileops.list_entries)
glob_paths = _translated(_fileops.glob_paths)


@_translated
def read_text(
    root: Root,
    parts: tuple[str, ...],
    *,
    start_line: int | None,
    end_line: int | None,
    max_bytes: int,
) -> str:
    """Text of the file (or a 1-based inclusive line range), binary refused."""
    data = _fileops.read_text_bytes(root, parts, start_line, end_line, max_bytes)
    return data.decode("utf-8", errors="replace")


@_translated
def write_bytes(root: Root, parts: tuple[str, ...], data: bytes, *, append: bool) -> None:
    if append:
        _fileops.append_chunks(root, parts, (data,))
    else:
        _fileops.replace_chunks(root, parts, (data,))


@_translated
def grep_files(
    root: Root,
    parts: tuple[str, ...],
    regex: re.Pattern[str],
    *,
    file_glob: str | None,
    max_results: int,
    max_file_bytes: int,
) -> list[GrepMatch]:
    """In-process search (trusted patterns only: a model's regex goes to ``search_in_subprocess``)."""
    found = _fileops.grep_files(root, parts, regex, file_glob, max_results, max_file_bytes)
    return [GrepMatch(path=p, line_number=n, line=line) for p, n, line in found]


@_translated
def give_to(root: Root, parts: tuple[str, ...], uid: int, gid: int) -> None:
    """Chown each root-owned component of ``parts`` (never through a link) to ``uid:gid``.

    The server, running as root, hands what it writes to the sandbox's
    unprivileged user so that user's commands can change it.
    """
    for index in range(len(parts)):
        dir_fd = _fileops.open_dir(root, parts[:index])
        try:
            info = os.stat(parts[index], dir_fd=dir_fd, follow_symlinks=False)
            if info.st_uid == 0 and not stat.S_ISLNK(info.st_mode):
                os.chown(parts[index], uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        finally:
            os.close(dir_fd)


class _SearchWorker:
    """A ``_fileops.py --serve`` process: one search at a time, reused until it overruns."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> _SearchWorker:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            str(_FILEOPS_PROGRAM),
            "--serve",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={"PATH": os.defpath, "LANG": "C.UTF-8"},
            start_new_session=True,
            limit=_MAX_REPLY_BYTES,
        )
        return cls(process)

    async def ask(self, body: bytes, timeout: float) -> bytes:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(body + b"\n")
        await self.process.stdin.drain()
        return await asyncio.wait_for(self.process.stdout.readline(), timeout)

    async def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


# Idle search workers of each event loop (asyncio processes belong to one loop);
# a worker whose loop closes sees end of input and exits.
_idle: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_SearchWorker]] = (
    weakref.WeakKeyDictionary()
)


async def search_in_subprocess(
    root: Root, parts: tuple[str, ...], request: dict[str, Any], *, timeout: float
) -> list[Any]:
    """Run a ``grep``/``glob`` request in a search worker process, stopped at its limit.

    A regular expression holds the interpreter lock while it backtracks, so
    even a worker thread would freeze the event loop: searches with a
    model's pattern run in their own process (reused between searches), with
    a timer inside and a kill outside.
    """
    body = json.dumps(
        {
            **request,
            "virtual": root.virtual,
            "base": str(root.base),
            "chain": list(root.chain),
            "parts": list(parts),
            "timeout": timeout,
        }
    ).encode("utf-8")
    idle = _idle.setdefault(asyncio.get_running_loop(), [])
    worker = idle.pop() if idle else await _SearchWorker.start()
    try:
        line = await worker.ask(body, timeout + _KILL_GRACE_SECONDS)
    except BaseException as exc:
        await worker.kill()
        if isinstance(exc, TimeoutError):
            raise SandboxError(
                f"{request.get('op', 'search')} stopped after its {timeout:g}-second limit"
            ) from None
        if isinstance(exc, (OSError, ValueError)):
            raise SandboxError(f"the search failed: {exc}") from None
        raise
    try:
        reply = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        await worker.kill()
        raise SandboxError("the search failed: its worker gave no reply") from None
    if len(idle) < _MAX_IDLE_WORKERS:
        idle.append(worker)
    else:
        await worker.kill()
    if not reply.get("ok"):
        raise to_sandbox_error(str(reply.get("kind")), str(reply.get("message")))
    result = reply.get("result")
    return result if isinstance(result, list) else []
