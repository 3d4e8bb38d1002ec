"""Real file and shell tools for the guard-middleware tests.

They have the names and arguments of the sandbox tools (``bash``,
``read_file``, ``write_file``, ``str_replace``) and work on the thread's
host directories (``<data root>/users/{user}/threads/{thread}/user-data``),
the layout the local sandbox provider serves, so the guards can be driven
through real agent runs before and independently of the sandbox package.
Each tool has a sync and an async implementation (file I/O off the loop).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.types import Command

from auth.identity import resolve_runtime_user_id
from middlewares._content_probe import HostPathContentProbe, ProbeTarget, normalize_virtual_path
from runtime.config import get_settings
from runtime.paths import thread_paths

__all__ = [
    "bash",
    "read_file",
    "read_file_command",
    "read_file_command_extra",
    "str_replace",
    "write_file",
]

_TIMEOUT = 20


def _thread_id(runtime: ToolRuntime[Any, Any]) -> str:
    configurable = (runtime.config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if not thread_id:
        raise ValueError("these tools need a thread_id in the run config")
    return str(thread_id)


def _host(runtime: ToolRuntime[Any, Any], path: str) -> Path:
    probe = HostPathContentProbe(get_settings().data_root_path())
    target = ProbeTarget(
        path=normalize_virtual_path(path),
        user_id=resolve_runtime_user_id(runtime),
        thread_id=_thread_id(runtime),
        sandbox_id=None,
    )
    return probe.host_path(target)


def _workspace(runtime: ToolRuntime[Any, Any]) -> Path:
    paths = thread_paths(
        get_settings().data_root_path(), resolve_runtime_user_id(runtime), _thread_id(runtime)
    )
    paths.workspace.mkdir(parents=True, exist_ok=True)
    return paths.workspace


# -- read_file ---------------------------------------------------------------


def _read(
    runtime: ToolRuntime[Any, Any], path: str, start_line: int | None, end_line: int | None
) -> str:
    try:
        text = _host(runtime, path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"Error: {path} does not exist"
    except Exception as exc:
        return f"Error: cannot read {path}: {exc}"
    lines = text.splitlines(keepends=True)
    start = (start_line or 1) - 1
    end = end_line or len(lines)
    return "".join(lines[start:end]) or "(empty)"


def _read_file(
    description: str,
    path: str,
    runtime: ToolRuntime[Any, Any],
    start_line: int | None = None,
    end_line: int | None = None,
) -> str:
    return _read(runtime, path, start_line, end_line)


async def _aread_file(
    description: str,
    path: str,
    runtime: ToolRuntime[Any, Any],
    start_line: int | None = None,
    end_line: int | None = None,
) -> str:
    return await asyncio.to_thread(_read, runtime, path, start_line, end_line)


read_file: BaseTool = StructuredTool.from_function(
    func=_read_file,
    coroutine=_aread_file,
    name="read_file",
    description="Read a text file (optionally a line range).",
)


def _read_as_command(
    description: str,
    path: str,
    runtime: ToolRuntime[Any, Any],
    start_line: int | None = None,
    end_line: int | None = None,
) -> Command[Any]:
    text = _read(runtime, path, start_line, end_line)
    return Command(
        update={"messages": [ToolMessage(text, tool_call_id=runtime.tool_call_id or "")]}
    )


async def _aread_as_command(
    description: str,
    path: str,
    runtime: ToolRuntime[Any, Any],
    start_line: int | None = None,
    end_line: int | None = None,
) -> Command[Any]:
    return await asyncio.to_thread(
        _read_as_command, description, path, runtime, start_line, end_line
    )


read_file_command: BaseTool = StructuredTool.from_function(
    func=_read_as_command,
    coroutine=_aread_as_command,
    name="read_file",
    description="Read a text file; the result comes back as a Command.",
)


def _read_with_extra(
    description: str,
    path: str,
    runtime: ToolRuntime[Any, Any],
    start_line: int | None = None,
    end_line: int | None = None,
) -> Command[Any]:
    """Answer with the read *first* and an unrelated ToolMessage *last*."""
    text = _read(runtime, path, start_line, end_line)
    return Command(
        update={
            "messages": [
                ToolMessage(text, tool_call_id=runtime.tool_call_id or ""),
                ToolMessage("side note", tool_call_id="some-other-call"),
            ]
        }
    )


async def _aread_with_extra(
    description: str,
    path: str,
    runtime: ToolRuntime[Any, Any],
    start_line: int | None = None,
    end_line: int | None = None,
) -> Command[Any]:
    return await asyncio.to_thread(
        _read_with_extra, description, path, runtime, start_line, end_line
    )


read_file_command_extra: BaseTool = StructuredTool.from_function(
    func=_read_with_extra,
    coroutine=_aread_with_extra,
    name="read_file",
    description="Read a text file; its Command also carries an unrelated ToolMessage.",
)


# -- write_file ----------------------------------------------------------------


def _write(runtime: ToolRuntime[Any, Any], path: str, content: str, append: bool) -> str:
    try:
        host = _host(runtime, path)
        host.parent.mkdir(parents=True, exist_ok=True)
        with host.open("a" if append else "w", encoding="utf-8") as handle:
            handle.write(content)
    except Exception as exc:
        return f"Error: cannot write {path}: {exc}"
    return f"OK: wrote {len(content)} characters to {normalize_virtual_path(path)}"


def _write_file(
    description: str,
    path: str,
    content: str,
    runtime: ToolRuntime[Any, Any],
    append: bool = False,
) -> str:
    return _write(runtime, path, content, append)


async def _awrite_file(
    description: str,
    path: str,
    content: str,
    runtime: ToolRuntime[Any, Any],
    append: bool = False,
) -> str:
    return await asyncio.to_thread(_write, runtime, path, content, append)


write_file: BaseTool = StructuredTool.from_function(
    func=_write_file,
    coroutine=_awrite_file,
    name="write_file",
    description="Write (or append to) a text file.",
)


# -- str_replace -------------------------------------------------------------------


def _replace(
    runtime: ToolRuntime[Any, Any], path: str, old_str: str, new_str: str, replace_all: bool
) -> str:
    try:
        host = _host(runtime, path)
        text = host.read_text(encoding="utf-8")
    except Exception as exc:
        return f"Error: cannot edit {path}: {exc}"
    count = text.count(old_str)
    if count == 0:
        return f"Error: old_str not found in {path}"
    if count > 1 and not replace_all:
        return f"Error: old_str occurs {count} times in {path}; pass replace_all"
    host.write_text(text.replace(old_str, new_str, -1 if replace_all else 1), encoding="utf-8")
    return f"OK: replaced {count if replace_all else 1} occurrence(s) in {path}"


def _str_replace(
    description: str,
    path: str,
    old_str: str,
    new_str: str,
    runtime: ToolRuntime[Any, Any],
    replace_all: bool = False,
) -> str:
    return _replace(runtime, path, old_str, new_str, replace_all)


async def _astr_replace(
    description: str,
    path: str,
    old_str: str,
    new_str: str,
    runtime: ToolRuntime[Any, Any],
    replace_all: bool = False,
) -> str:
    return await asyncio.to_thread(_replace, runtime, path, old_str, new_str, replace_all)


str_replace: BaseTool = StructuredTool.from_function(
    func=_str_replace,
    coroutine=_astr_replace,
    name="str_replace",
    description="Replace text in a file.",
)


# -- bash ---------------------------------------------------------------------------


def _format(output: bytes, code: int) -> str:
    text = output.decode("utf-8", errors="replace")
    return f"{text}\n[exit code: {code}]" if text else f"[exit code: {code}]"


def _bash(description: str, command: str, runtime: ToolRuntime[Any, Any]) -> str:
    completed = subprocess.run(
        ["bash", "-c", command],
        cwd=_workspace(runtime),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=_TIMEOUT,
        check=False,
    )
    return _format(completed.stdout, completed.returncode)


async def _abash(description: str, command: str, runtime: ToolRuntime[Any, Any]) -> str:
    workspace = await asyncio.to_thread(_workspace, runtime)
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=workspace,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=_TIMEOUT)
    return _format(output, process.returncode or 0)


bash: BaseTool = StructuredTool.from_function(
    func=_bash,
    coroutine=_abash,
    name="bash",
    description="Run a shell command in the thread's workspace.",
)
