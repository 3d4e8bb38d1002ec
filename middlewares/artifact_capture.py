"""ArtifactCaptureMiddleware (spec 000, number 16): files and resources become thread artifacts.

Why: a file the agent presents, or a resource an MCP tool hands back, should
outlive the tool call as something the user can download and a later tool
call can name by a stable handle, without the bytes riding in checkpointed
messages. The contract is in ``docs/artifacts.md``; in short:

- ``present_files`` results (their ``artifacts`` update) get a handle
  ``artifact://<24 hex>`` per presented path.
- Results of MCP tools (tool metadata ``deerflow_mcp``; a caller cannot set
  that) may carry resources in ``ToolMessage.artifact["deerflow_resources"]``
  or ``additional_kwargs["deerflow_resources"]``: a list of
  ``{uri, mime_type, name}`` plus ``bytes_b64`` or ``text`` for embedded
  resources (a resource link has neither). Embedded content is written
  through the run's own sandbox to ``/mnt/user-data/outputs/mcp/``, added to
  ``artifacts`` (so the existing download route serves it with its owner
  checks) and the bytes are removed from the message; links are recorded by
  URI only. The message gets one line per captured resource naming its handle.

Capture is innermost in the tool base (after error handling), so it sees the
tool's own result. A resource it cannot use (bad base64, too big, no sandbox)
is skipped with a note in the result, never a failed run.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import mimetypes
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from middlewares._sync import run_sync
from middlewares.model_content_compatibility import model_visible_location
from runtime.config import Settings
from runtime.paths import VIRTUAL_OUTPUTS, thread_paths
from runtime.state import ThreadState
from runtime.untrusted_content import neutralize_untrusted_tags
from sandbox import hostfs as _hostfs
from sandbox.base import SandboxError, SandboxProvider
from sandbox.provider import get_sandbox_provider
from sandbox.session import SandboxBinding, resolve_binding
from sandbox.uploads import sanitize_filename

__all__ = [
    "ARTIFACT_DIR",
    "HANDLE_PATTERN",
    "HANDLE_PREFIX",
    "MCP_TOOL_METADATA_KEY",
    "RESOURCES_KEY",
    "ArtifactCaptureMiddleware",
    "artifact_handle",
]

logger = logging.getLogger(__name__)

HANDLE_PREFIX = "artifact://"
HANDLE_PATTERN = re.compile(r"artifact://[0-9a-f]{24}")
RESOURCES_KEY = "deerflow_resources"
MCP_TOOL_METADATA_KEY = "deerflow_mcp"
ARTIFACT_DIR = f"{VIRTUAL_OUTPUTS}/mcp"
MAX_RESOURCE_BYTES = 50 * 1024 * 1024
MAX_RESOURCES_PER_RESULT = 20

ToolResult = ToolMessage | Command[Any]


def artifact_handle(kind: str, key: str) -> str:
    """The stable handle of an artifact: ``file`` + virtual path, ``blob`` + sha256, ``link`` + URI."""
    digest = hashlib.sha256(f"{kind}\n{key}".encode()).hexdigest()[:24]
    return f"{HANDLE_PREFIX}{digest}"


def _clean(value: Any, limit: int = 200) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return neutralize_untrusted_tags(" ".join(value.split())[:limit]) or None


@dataclass
class _Capture:
    handles: dict[str, dict[str, Any]] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    sandbox_id: str | None = None


def _filename(resource: Mapping[str, Any], digest: str, mime: str | None) -> str:
    name = sanitize_filename(resource.get("name")) or sanitize_filename(
        str(resource.get("uri") or "").split("?", 1)[0].rstrip("/")
    )
    if not name:
        name = "resource" + ((mimetypes.guess_extension(mime) or "") if mime else "")
    return f"{digest[:12]}-{name}"


def _decode(resource: Mapping[str, Any]) -> bytes | None:
    raw = resource.get("bytes_b64")
    if isinstance(raw, str):
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return None
    text = resource.get("text")
    if isinstance(text, str):
        return text.encode("utf-8")
    return None


def _stripped(resource: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in resource.items() if k not in ("bytes_b64", "text")}


def _resources(message: ToolMessage) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for holder in (message.artifact, message.additional_kwargs):
        raw = holder.get(RESOURCES_KEY) if isinstance(holder, Mapping) else None
        if isinstance(raw, list):
            found.extend(r for r in raw if isinstance(r, Mapping))
    return found


def _without_bytes(message: ToolMessage, lines: list[str]) -> ToolMessage:
    update: dict[str, Any] = {}
    if isinstance(message.artifact, Mapping) and RESOURCES_KEY in message.artifact:
        artifact = dict(message.artifact)
        raw = artifact[RESOURCES_KEY]
        artifact[RESOURCES_KEY] = [
            _stripped(r) for r in (raw if isinstance(raw, list) else []) if isinstance(r, Mapping)
        ]
        update["artifact"] = artifact
    if RESOURCES_KEY in (message.additional_kwargs or {}):
        kwargs = dict(message.additional_kwargs)
        raw = kwargs[RESOURCES_KEY]
        kwargs[RESOURCES_KEY] = [
            _stripped(r) for r in (raw if isinstance(raw, list) else []) if isinstance(r, Mapping)
        ]
        update["additional_kwargs"] = kwargs
    if lines:
        note = "\n".join(lines)
        content = message.content
        if isinstance(content, str):
            update["content"] = f"{content}\n{note}" if content else note
        else:
            update["content"] = [*content, {"type": "text", "text": note}]
    return message.model_copy(update=update) if update else message


class ArtifactCaptureMiddleware(AgentMiddleware[ThreadState, Any]):
    """Record presented files and MCP resources as thread artifacts with stable handles."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    state_schema = ThreadState

    def __init__(
        self,
        settings: Settings,
        *,
        max_resource_bytes: int = MAX_RESOURCE_BYTES,
        max_resources_per_result: int = MAX_RESOURCES_PER_RESULT,
        provider: SandboxProvider | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(max_resource_bytes, int) or max_resource_bytes < 1:
            raise ValueError("max_resource_bytes must be a positive integer")
        if not isinstance(max_resources_per_result, int) or max_resources_per_result < 1:
            raise ValueError("max_resources_per_result must be a positive integer")
        self._settings = settings
        self.max_resource_bytes = max_resource_bytes
        self.max_resources_per_result = max_resources_per_result
        self._provider = provider

    @property
    def provider(self) -> SandboxProvider:
        if self._provider is None:
            self._provider = get_sandbox_provider(self._settings)
        return self._provider

    # --- presented files -----------------------------------------------------

    @staticmethod
    def _presented(result: ToolResult, tool_name: str) -> ToolResult:
        if tool_name != "present_files" or not isinstance(result, Command):
            return result
        update = result.update if isinstance(result.update, dict) else None
        paths = update.get("artifacts") if update else None
        if not update or not isinstance(paths, list):
            return result
        handles = {
            artifact_handle("file", path): {"kind": "file", "path": path, "source": tool_name}
            for path in paths
            if isinstance(path, str)
        }
        if not handles:
            return result
        lines = [
            f"- {path}: {handle}" for handle, path in ((h, r["path"]) for h, r in handles.items())
        ]
        messages = [
            _without_bytes(m, ["Artifact handles:", *lines]) if isinstance(m, ToolMessage) else m
            for m in update.get("messages", [])
        ]
        new_update = {**update, "messages": messages, "artifact_handles": handles}
        return Command(
            graph=result.graph, update=new_update, resume=result.resume, goto=result.goto
        )

    # --- MCP resources -------------------------------------------------------

    async def _host_copy(self, binding: SandboxBinding, virtual: str, data: bytes) -> None:
        data_root = binding.settings.data_root_path()
        paths = thread_paths(data_root, binding.user_id, binding.thread_id)
        root = _hostfs.HostRoot(
            VIRTUAL_OUTPUTS, data_root, paths.outputs.relative_to(data_root).parts
        )
        parts = tuple(virtual[len(VIRTUAL_OUTPUTS) + 1 :].split("/"))
        await asyncio.to_thread(_hostfs.write_bytes, root, parts, data, append=False)

    async def _capture_one(
        self,
        resource: Mapping[str, Any],
        tool_name: str,
        request: ToolCallRequest,
        capture: _Capture,
        binding: list[SandboxBinding | None],
    ) -> None:
        uri = resource.get("uri") if isinstance(resource.get("uri"), str) else None
        mime = resource.get("mime_type") if isinstance(resource.get("mime_type"), str) else None
        name = _clean(resource.get("name"))
        shown = _clean(model_visible_location(uri)) or "(no location)"
        data = _decode(resource)
        if data is None:
            if "bytes_b64" in resource:
                capture.lines.append(
                    f"[resource {shown} not saved: its content is not valid base64]"
                )
                return
            if not uri:
                return
            handle = artifact_handle("link", uri)
            capture.handles[handle] = {
                "kind": "link", "path": None, "uri": uri, "name": name,
                "mime_type": mime, "source": tool_name,
            }  # fmt: skip
            capture.lines.append(f"[artifact {handle}: resource link {shown}]")
            return
        if len(data) > self.max_resource_bytes:
            capture.lines.append(
                f"[resource {shown} not saved: larger than {self.max_resource_bytes} bytes]"
            )
            return
        bound = binding[0]
        if bound is None:
            bound = binding[0] = await resolve_binding(
                self._settings, request.state, request.runtime, provider=self.provider
            )
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        virtual = f"{ARTIFACT_DIR}/{_filename(resource, digest, mime)}"
        await bound.sandbox.upload_bytes(virtual, data)
        if not bound.sandbox.shares_host_user_data:
            await self._host_copy(bound, virtual, data)
        if bound.needs_persist:
            capture.sandbox_id = bound.sandbox.id
        handle = artifact_handle("blob", digest)
        capture.handles[handle] = {
            "kind": "blob", "path": virtual, "uri": uri, "name": name, "mime_type": mime,
            "size": len(data), "sha256": digest, "source": tool_name,
        }  # fmt: skip
        if virtual not in capture.paths:
            capture.paths.append(virtual)
        capture.lines.append(f"[artifact {handle}: {shown} saved as {virtual}]")

    @staticmethod
    def _carries_resources(request: ToolCallRequest, result: ToolResult) -> bool:
        tool = request.tool
        return (
            tool is not None
            and bool((tool.metadata or {}).get(MCP_TOOL_METADATA_KEY))
            and isinstance(result, ToolMessage)
            and bool(_resources(result))
        )

    async def _mcp(self, request: ToolCallRequest, result: ToolResult) -> ToolResult:
        tool = request.tool
        if tool is None or not isinstance(result, ToolMessage):
            return result
        resources = _resources(result)
        capture = _Capture()
        binding: list[SandboxBinding | None] = [None]
        for index, resource in enumerate(resources):
            if index >= self.max_resources_per_result:
                capture.lines.append(
                    f"[{len(resources) - index} more resources not saved: "
                    f"at most {self.max_resources_per_result} per result]"
                )
                break
            try:
                await self._capture_one(resource, tool.name, request, capture, binding)
            except (SandboxError, OSError) as exc:
                logger.warning("artifact capture from %s failed: %s", tool.name, exc)
                capture.lines.append("[resource not saved: the sandbox could not store it]")
        message = _without_bytes(result, capture.lines)
        update: dict[str, Any] = {"messages": [message]}
        if capture.handles:
            update["artifact_handles"] = capture.handles
        if capture.paths:
            update["artifacts"] = capture.paths
        if capture.sandbox_id:
            update["sandbox"] = {"sandbox_id": capture.sandbox_id}
        return Command(update=update)

    # --- hooks ---------------------------------------------------------------

    def _name(self, request: ToolCallRequest) -> str:
        return str(request.tool_call.get("name") or "")

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        result = self._presented(handler(request), self._name(request))
        if not self._carries_resources(request, result):
            return result
        return run_sync(self._mcp(request, result), name="artifact-capture")

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        result = self._presented(await handler(request), self._name(request))
        if not self._carries_resources(request, result):
            return result
        return await self._mcp(request, result)
