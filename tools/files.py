"""File tools: ``ls``, ``glob``, ``grep``, ``read_file``, ``write_file``, ``str_replace``.

They speak the sandbox contract only, so they behave the same on every
provider. Paths are virtual; relative paths are relative to the workspace.
"""

from __future__ import annotations

from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.tools import tool
from langgraph.types import Command

from runtime.paths import VIRTUAL_WORKSPACE
from sandbox.base import SandboxError
from sandbox.session import SandboxBinding
from tools._common import mark_sandbox_tool, run_sandbox_tool

__all__ = [
    "MAX_READ_CHARS",
    "glob_tool",
    "grep",
    "ls",
    "read_file",
    "str_replace",
    "write_file",
]

# What read_file hands the model at most; longer files are read in line ranges.
MAX_READ_CHARS = 100_000
_LIST_LIMIT = 1000


@tool("ls", parse_docstring=True)
async def _ls(description: str, path: str, runtime: ToolRuntime[Any, Any]) -> str | Command[Any]:
    """List a directory two levels deep. Directories end with '/', links with '@'.

    Args:
        description: One short sentence saying why you list this directory.
        path: Directory to list, e.g. /mnt/user-data/workspace.
    """

    async def operation(binding: SandboxBinding) -> str:
        entries = await binding.sandbox.list_dir(path, max_depth=2)
        if not entries:
            return f"{path}: (empty directory)"
        text = "\n".join(entries)
        if len(entries) >= _LIST_LIMIT:
            text += f"\n[listing stopped at {_LIST_LIMIT} entries; list a subdirectory]"
        return text

    return await run_sandbox_tool("ls", runtime, operation)


@tool("glob", parse_docstring=True)
async def _glob(
    description: str,
    pattern: str,
    runtime: ToolRuntime[Any, Any],
    path: str = VIRTUAL_WORKSPACE,
    max_results: int = 200,
) -> str | Command[Any]:
    """Find files whose path below `path` matches a glob pattern ('**' spans directories).

    Args:
        description: One short sentence saying what you are looking for.
        pattern: Glob relative to `path`, e.g. '**/*.py' or 'data/*.csv'.
        path: Directory to search from (default: the workspace).
        max_results: Return at most this many paths.
    """

    async def operation(binding: SandboxBinding) -> str:
        limit = min(max(int(max_results), 1), 1000)
        found = await binding.sandbox.glob(pattern, path)
        if not found:
            return f"No paths under {path} match {pattern!r}."
        shown = found[:limit]
        text = "\n".join(shown)
        if len(found) > limit:
            text += f"\n[{len(found) - limit} more matches not shown]"
        return text

    return await run_sandbox_tool("glob", runtime, operation)


@tool("grep", parse_docstring=True)
async def _grep(
    description: str,
    pattern: str,
    path: str,
    runtime: ToolRuntime[Any, Any],
    glob: str | None = None,
    literal: bool = False,
    case_sensitive: bool = False,
    max_results: int = 100,
) -> str | Command[Any]:
    """Search file contents for a regular expression (or literal text).

    Binary files are skipped. Each match is shown as path:line: text.

    Args:
        description: One short sentence saying what you are looking for.
        pattern: Python regular expression, or plain text when literal is true.
        path: File or directory to search.
        glob: Only search files whose name or relative path matches this glob.
        literal: Treat the pattern as plain text.
        case_sensitive: Match case exactly (default: case-insensitive).
        max_results: Stop after this many matching lines.
    """

    async def operation(binding: SandboxBinding) -> str:
        matches = await binding.sandbox.grep(
            pattern,
            path,
            glob=glob,
            literal=literal,
            case_sensitive=case_sensitive,
            max_results=max_results,
        )
        if not matches:
            return "No matches."
        text = "\n".join(f"{m.path}:{m.line_number}: {m.line}" for m in matches)
        if len(matches) >= max_results:
            text += f"\n[stopped at {max_results} matches]"
        return text

    return await run_sandbox_tool("grep", runtime, operation)


@tool("read_file", parse_docstring=True)
async def _read_file(
    description: str,
    path: str,
    runtime: ToolRuntime[Any, Any],
    start_line: int | None = None,
    end_line: int | None = None,
) -> str | Command[Any]:
    """Read a text file, whole or a range of lines (1-based, inclusive).

    Args:
        description: One short sentence saying why you read this file.
        path: The file to read.
        start_line: First line to return (default: the first).
        end_line: Last line to return (default: the last).
    """

    async def operation(binding: SandboxBinding) -> str:
        text = await binding.sandbox.read_file(path, start_line, end_line)
        if text == "":
            return "(empty file)" if start_line is None else "(no lines in that range)"
        if len(text) > MAX_READ_CHARS:
            return (
                text[:MAX_READ_CHARS]
                + f"\n[truncated: the text is {len(text)} characters; read it in line ranges]"
            )
        return text

    return await run_sandbox_tool("read_file", runtime, operation)


@tool("write_file", parse_docstring=True)
async def _write_file(
    description: str,
    path: str,
    content: str,
    runtime: ToolRuntime[Any, Any],
    append: bool = False,
) -> str | Command[Any]:
    """Write text to a file, creating parent directories; replaces it unless append is true.

    Args:
        description: One short sentence saying why you write this file.
        path: The file to write, e.g. /mnt/user-data/outputs/report.md.
        content: The full text to write (or to append).
        append: Add to the end of the file instead of replacing it.
    """

    async def operation(binding: SandboxBinding) -> str:
        await binding.sandbox.write_file(path, content, append=append)
        size = len(content.encode("utf-8", errors="surrogatepass"))
        return f"{'Appended' if append else 'Wrote'} {size} bytes to {path}."

    return await run_sandbox_tool("write_file", runtime, operation)


@tool("str_replace", parse_docstring=True)
async def _str_replace(
    description: str,
    path: str,
    old_str: str,
    new_str: str,
    runtime: ToolRuntime[Any, Any],
    replace_all: bool = False,
) -> str | Command[Any]:
    """Replace exact text in a file. old_str must occur exactly once unless replace_all is true.

    Args:
        description: One short sentence saying what you change.
        path: The file to edit.
        old_str: The exact text to replace (include enough context to make it unique).
        new_str: The text to put in its place.
        replace_all: Replace every occurrence instead of requiring exactly one.
    """

    async def operation(binding: SandboxBinding) -> str:
        if old_str == "":
            raise SandboxError("old_str is empty; give the exact text to replace")
        limit = binding.settings.sandbox.max_read_bytes
        # Read with read_file's own limit (and binary refusal), never a bigger one.
        text = await binding.sandbox.read_file(path)
        if "\ufffd" in text:  # undecodable bytes, or a real U+FFFD: check the exact bytes
            raw = await binding.sandbox.download_bytes(path)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise SandboxError(
                    f"{path}: is not valid UTF-8; str_replace would corrupt it (use bash instead)"
                ) from None
        count = text.count(old_str)
        if count == 0:
            raise SandboxError(
                f"old_str was not found in {path}; read the file and copy it exactly"
            )
        if count > 1 and not replace_all:
            raise SandboxError(
                f"old_str occurs {count} times in {path}; add surrounding text to make it "
                "unique, or set replace_all to true"
            )
        replaced = count if replace_all else 1
        # Size the result before building it: replace_all can multiply a file.
        size = len(text.encode("utf-8", errors="surrogatepass"))
        growth = len(new_str.encode("utf-8", errors="surrogatepass")) - len(
            old_str.encode("utf-8", errors="surrogatepass")
        )
        if size + replaced * growth > limit:
            raise SandboxError(
                f"str_replace refused: replacing {replaced} occurrence"
                f"{'s' if replaced != 1 else ''} would make {path} {size + replaced * growth} "
                f"bytes, more than the {limit}-byte limit of the file tools; make a smaller "
                "edit or generate the file with bash"
            )
        updated = (
            text.replace(old_str, new_str) if replace_all else text.replace(old_str, new_str, 1)
        )
        await binding.sandbox.write_file(path, updated)
        return f"Replaced {replaced} occurrence{'s' if replaced != 1 else ''} in {path}."

    return await run_sandbox_tool("str_replace", runtime, operation)


ls = mark_sandbox_tool(_ls)
glob_tool = mark_sandbox_tool(_glob)
grep = mark_sandbox_tool(_grep)
read_file = mark_sandbox_tool(_read_file)
write_file = mark_sandbox_tool(_write_file)
str_replace = mark_sandbox_tool(_str_replace)
