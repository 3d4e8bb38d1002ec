"""What every sandbox tool shares: finding the sandbox, errors, and results.

A user-caused problem (bad path, missing file, invalid pattern, a sandbox
that cannot be acquired) becomes an error ``ToolMessage`` through
``ToolException`` and the tool's ``handle_tool_error``; it never raises into
the run. Anything else is a bug and propagates to the error-handling
middleware.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, ToolException
from langgraph.types import Command

from runtime.config import aget_settings
from sandbox.base import SandboxError
from sandbox.session import SandboxBinding, current_binding, resolve_binding

__all__ = [
    "SANDBOX_TOOL_METADATA_KEY",
    "ToolOutcome",
    "is_sandbox_tool",
    "mark_sandbox_tool",
    "run_sandbox_tool",
]

# Tools carrying this metadata key get their sandbox from SandboxMiddleware.
SANDBOX_TOOL_METADATA_KEY = "deerflow_sandbox_tool"


@dataclass
class ToolOutcome:
    """A result that needs more than a string: structured content or a state update."""

    content: str | list[str | dict[str, Any]]
    update: dict[str, Any] = field(default_factory=dict)
    status: str = "success"
    artifact: Any = None


def mark_sandbox_tool(tool: BaseTool) -> BaseTool:
    tool.metadata = {**(tool.metadata or {}), SANDBOX_TOOL_METADATA_KEY: True}
    tool.handle_tool_error = True
    return tool


def is_sandbox_tool(tool: BaseTool | None) -> bool:
    return bool(tool is not None and (tool.metadata or {}).get(SANDBOX_TOOL_METADATA_KEY))


def _message(
    name: str, runtime: ToolRuntime[Any, Any], content: Any, *, status: str, artifact: Any = None
) -> ToolMessage:
    return ToolMessage(
        content=content,
        tool_call_id=runtime.tool_call_id or "",
        name=name,
        status=status,  # type: ignore[arg-type]
        artifact=artifact,
    )


async def run_sandbox_tool(
    name: str,
    runtime: ToolRuntime[Any, Any],
    operation: Callable[[SandboxBinding], Awaitable[str | ToolOutcome]],
) -> str | Command[Any]:
    """Run ``operation`` against this call's sandbox and shape the result."""
    binding = current_binding()
    persist: dict[str, Any] = {}
    if binding is None:
        # No SandboxMiddleware in this chain: resolve here, persist ourselves.
        try:
            binding = await resolve_binding(await aget_settings(), runtime.state, runtime)
        except SandboxError as exc:
            raise ToolException(f"Error: the sandbox is unavailable: {exc}") from None
        if binding.needs_persist:
            persist = {"sandbox": {"sandbox_id": binding.sandbox.id}}
    try:
        result = await operation(binding)
    except SandboxError as exc:
        if not persist:
            raise ToolException(f"Error: {exc}") from None
        result = ToolOutcome(f"Error: {exc}", status="error")
    if isinstance(result, str) and not persist:
        return result
    outcome = result if isinstance(result, ToolOutcome) else ToolOutcome(result)
    message = _message(
        name, runtime, outcome.content, status=outcome.status, artifact=outcome.artifact
    )
    return Command(update={**outcome.update, **persist, "messages": [message]})
