"""ArtifactResolutionMiddleware (spec 000, number 10): artifact handles become sandbox paths.

Why: a model refers to a captured file by the stable handle it was shown
(``artifact://<24 hex>``, see ``docs/artifacts.md``), not by a path it may
mistype. Before a tool runs, every handle in its arguments (a whole string
value or inside one, at any depth) is replaced by the artifact's sandbox path
from state ``artifact_handles``. Only the executed call is rewritten: the
checkpointed ``AIMessage`` keeps the handle, so history stays stable.

A handle this thread does not know, or one with no file behind it (a resource
link), answers an error tool result naming it instead of running the tool
with a dangling value. Recorded paths are re-validated (state is
client-writable): only canonical paths under ``/mnt/user-data/outputs`` are used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from middlewares.artifact_capture import HANDLE_PATTERN
from runtime.paths import VIRTUAL_OUTPUTS
from runtime.state import ThreadState
from sandbox.base import SandboxError
from sandbox.paths import parse_virtual_path

__all__ = ["ArtifactResolutionMiddleware", "UnresolvedHandleError"]

ToolResult = ToolMessage | Command[Any]
_MAX_DEPTH = 32


class UnresolvedHandleError(ValueError):
    """A handle in tool arguments that this thread cannot resolve to a file."""


def _paths(state: Any) -> dict[str, str]:
    raw = state.get("artifact_handles") if isinstance(state, Mapping) else None
    paths: dict[str, str] = {}
    for handle, record in raw.items() if isinstance(raw, Mapping) else ():
        path = record.get("path") if isinstance(record, Mapping) else None
        if not isinstance(handle, str) or not isinstance(path, str):
            continue
        try:
            virtual = parse_virtual_path(path)
        except SandboxError:
            continue
        if virtual.root == VIRTUAL_OUTPUTS and virtual.parts and virtual.virtual == path:
            paths[handle] = path
    return paths


def _rewrite(value: Any, paths: Mapping[str, str], depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, str):
        if "artifact://" not in value:
            return value

        def replace(match: Any) -> str:
            handle = match.group(0)
            if handle not in paths:
                raise UnresolvedHandleError(handle)
            return paths[handle]

        return HANDLE_PATTERN.sub(replace, value)
    if isinstance(value, dict):
        return {k: _rewrite(v, paths, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite(v, paths, depth + 1) for v in value]
    return value


class ArtifactResolutionMiddleware(AgentMiddleware[ThreadState, Any]):
    """Replace ``artifact://`` handles in tool arguments by their sandbox paths."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    state_schema = ThreadState

    def __init__(self) -> None:
        super().__init__()

    def _resolve(self, request: ToolCallRequest) -> ToolCallRequest | ToolMessage:
        args = request.tool_call.get("args")
        if "artifact://" not in repr(args):
            return request
        try:
            resolved = _rewrite(args, _paths(request.state))
        except UnresolvedHandleError as exc:
            return ToolMessage(
                content=(
                    f"Error: {exc} is not an artifact file of this thread; use a handle "
                    "shown for a saved artifact, or the file's /mnt/user-data/outputs path."
                ),
                tool_call_id=str(request.tool_call.get("id") or ""),
                name=str(request.tool_call.get("name") or ""),
                status="error",
            )
        if resolved == args:
            return request
        return request.override(tool_call={**request.tool_call, "args": resolved})

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        resolved = self._resolve(request)
        return resolved if isinstance(resolved, ToolMessage) else handler(resolved)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        resolved = self._resolve(request)
        return resolved if isinstance(resolved, ToolMessage) else await handler(resolved)
