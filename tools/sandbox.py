"""``bash``: run a shell command in the thread's sandbox."""

from __future__ import annotations

import re
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.tools import tool
from langgraph.types import Command

from sandbox.base import CommandResult
from sandbox.session import SandboxBinding
from tools._common import mark_sandbox_tool, run_sandbox_tool

__all__ = ["EXIT_MARKER_PATTERN", "bash", "format_command_result"]

# The last line of every bash result; guards that annotate results (SandboxAudit)
# insert their notes before it.
EXIT_MARKER_PATTERN = re.compile(r"\[exit code: -?\d+\]\Z")


def format_command_result(result: CommandResult, *, timeout: float | None = None) -> str:
    lines = [result.output.rstrip("\n") if result.output.strip() else "(no output)"]
    if result.timed_out:
        after = f" after {timeout:g} seconds" if timeout else ""
        lines.append(f"[command timed out{after}; its processes were killed]")
    lines.append(f"[exit code: {result.exit_code}]")
    return "\n".join(lines)


@tool("bash", parse_docstring=True)
async def _bash(
    description: str, command: str, runtime: ToolRuntime[Any, Any]
) -> str | Command[Any]:
    """Run a bash command in your sandbox and return its combined stdout and stderr.

    The working directory is /mnt/user-data/workspace. Uploaded files are in
    /mnt/user-data/uploads; put deliverables in /mnt/user-data/outputs. Long
    outputs are cut in the middle: redirect them to a file and read parts.
    Commands that run too long are killed. The result ends with the exit code.

    Args:
        description: One short sentence saying why you run this command.
        command: The bash command line to run.
    """

    async def operation(binding: SandboxBinding) -> str:
        result = await binding.sandbox.execute_command(command)
        return format_command_result(
            result, timeout=binding.settings.sandbox.command_timeout_seconds
        )

    return await run_sandbox_tool("bash", runtime, operation)


bash = mark_sandbox_tool(_bash)
