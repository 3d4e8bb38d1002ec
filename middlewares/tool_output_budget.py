"""ToolOutputBudgetMiddleware (spec 000, number 2): big tool output goes to a file.

A tool that prints 20 MB must not put 20 MB into the checkpoint or the next
model request. On the tool side (``wrap_tool_call``) a result whose text
exceeds ``tool_output.max_chars`` is written to the thread's outputs under
``tool_output.storage_subdir`` (default ``.tool-results``) and replaced by a
synopsis (kind, size, head, tail, table record count) plus the virtual path the
agent reads with ``read_file``. Non-text blocks of a mixed result (images,
files) are kept. On the model side (``wrap_model_call``) the same budget is a
last resort for oversized messages already in state (older checkpoints,
results that fell back inline), and successful ``write_file`` payloads that a
later same-path read/write superseded are elided from the request (the file on
disk is the reference), keeping the newest ``keep_recent_writes`` writes.

File names hash the raw call id (length-prefixed) and the UTF-8 content, so a
repeated identical result reuses one file and distinct results never collide;
provider ids never appear in names. Files are written to a unique temp file
with exclusive creation and atomically renamed. A hash or write failure falls
back inline, capped at ``inline_fallback_max_chars`` with a visible note.
All hashing, parsing and file I/O run off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import posixpath
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from auth.identity import resolve_runtime_user_id
from middlewares._prefix_fold import prefix_count
from middlewares._tool_results import map_tool_messages, tool_message_text
from middlewares.tool_call_args import pair_tool_call_results, rewrite_tool_call_args
from middlewares.tool_output_synopsis import describe_output, head_tail, render_synopsis
from middlewares.tool_transform_meta import append_tool_transform
from runtime.config import Settings, ToolOutputConfig
from runtime.paths import (
    TOOL_RESULTS_DIRNAME,
    VIRTUAL_OUTPUTS,
    is_internal_output_path,
    thread_paths,
)
from sandbox.base import Sandbox, SandboxError, SandboxProvider
from sandbox.provider import get_sandbox_provider
from sandbox.session import resolve_binding, state_sandbox_id

__all__ = [
    "TOOL_OUTPUT_KEY",
    "TOOL_RESULTS_DIRNAME",
    "ExternalizedOutput",
    "ToolOutputBudgetMiddleware",
    "externalize_output",
    "is_internal_output_path",
    "tool_output_filename",
]

logger = logging.getLogger(__name__)

TOOL_OUTPUT_KEY = "deerflow_tool_output"
_WRITE_TOOLS = ("write_file",)
_SUPERSEDING_TOOLS = ("read_file", "write_file", "str_replace")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")


def tool_output_filename(tool_name: str, tool_call_id: str | None, text: str, ext: str) -> str:
    """Deterministic name: sanitised tool name + SHA-256 of (id length, id, content).

    Raises ``UnicodeEncodeError`` for text that is not valid UTF-8 (callers
    fall back inline).
    """
    call_id = tool_call_id or ""
    digest = hashlib.sha256()
    digest.update(f"{len(call_id)}:".encode())
    digest.update(call_id.encode("utf-8"))
    digest.update(text.encode("utf-8"))
    safe = _UNSAFE_NAME.sub("_", tool_name)[:40].strip("_") or "tool"
    return f"{safe}-{digest.hexdigest()[:32]}.{ext}"


@dataclass(frozen=True)
class ExternalizedOutput:
    """Where a full output was saved, and its synopsis."""

    virtual_path: str
    host_path: Path | None
    """None when it was written through the sandbox (not on this host)."""
    chars: int
    bytes: int
    kind: str
    records: int | None
    synopsis: str


@dataclass(frozen=True)
class _Prepared:
    filename: str
    data: bytes
    virtual_path: str
    shape: Any


def _prepare(
    text: str, *, tool_name: str, tool_call_id: str | None, config: ToolOutputConfig
) -> _Prepared:
    shape = describe_output(text)
    filename = tool_output_filename(tool_name, tool_call_id, text, shape.extension)
    virtual = f"{VIRTUAL_OUTPUTS}/{config.storage_subdir}/{filename}"
    return _Prepared(filename, text.encode("utf-8"), virtual, shape)


def _saved(
    text: str, prepared: _Prepared, config: ToolOutputConfig, host_path: Path | None, tool: str
) -> ExternalizedOutput:
    synopsis = render_synopsis(
        text,
        tool_name=tool,
        shape=prepared.shape,
        head_chars=config.head_chars,
        tail_chars=config.tail_chars,
        virtual_path=prepared.virtual_path,
        total_bytes=len(prepared.data),
    )
    count = prepared.shape.count
    records = count.records if count is not None else None
    return ExternalizedOutput(
        prepared.virtual_path,
        host_path,
        len(text),
        len(prepared.data),
        prepared.shape.kind,
        records,
        synopsis,
    )


def externalize_output(
    text: str,
    *,
    tool_name: str,
    tool_call_id: str | None,
    outputs_dir: Path,
    config: ToolOutputConfig,
) -> ExternalizedOutput:
    """Save ``text`` under ``outputs_dir/storage_subdir`` and build its synopsis.

    Blocking: call off the event loop. Raises ``OSError`` or
    ``UnicodeEncodeError`` when the output cannot be saved.
    """
    prepared = _prepare(text, tool_name=tool_name, tool_call_id=tool_call_id, config=config)
    data = prepared.data
    directory = outputs_dir / config.storage_subdir
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / prepared.filename
    if not (final.is_file() and final.stat().st_size == len(data)):
        temp = directory / f".tool-output-{uuid.uuid4().hex}.tmp"
        created = False
        try:
            with open(temp, "xb") as handle:
                created = True
                handle.write(data)
            os.replace(temp, final)
        except OSError:
            if created:
                temp.unlink(missing_ok=True)
            raise
    return _saved(text, prepared, config, final, tool_name)


async def externalize_output_to_sandbox(
    text: str,
    *,
    tool_name: str,
    tool_call_id: str | None,
    sandbox: Sandbox,
    config: ToolOutputConfig,
) -> ExternalizedOutput:
    """Save ``text`` through the sandbox's file API (where ``read_file`` will look).

    For providers whose files are not the host's (Kubernetes pods): the output
    must land where the agent's ``read_file`` runs. Raises ``SandboxError``,
    ``OSError`` or ``UnicodeEncodeError`` when it cannot be saved.
    """
    prepared = _prepare(text, tool_name=tool_name, tool_call_id=tool_call_id, config=config)
    await sandbox.upload_bytes(prepared.virtual_path, prepared.data)
    return _saved(text, prepared, config, None, tool_name)


def _thread_id_from(config: Any) -> str | None:
    if not isinstance(config, dict):
        return None
    configurable = config.get("configurable") or {}
    value = configurable.get("thread_id") if isinstance(configurable, dict) else None
    return str(value) if value else None


def _current_thread_id(runtime: Any) -> str | None:
    found = _thread_id_from(getattr(runtime, "config", None))
    if found:
        return found
    try:
        from langgraph.config import get_config

        return _thread_id_from(get_config())
    except RuntimeError:
        return None


def _replace_text(message: ToolMessage, text: str) -> ToolMessage:
    """Swap the text of a result for ``text``; non-text blocks stay, in order."""
    content = message.content
    if isinstance(content, str):
        return message.model_copy(update={"content": text})
    blocks: list[Any] = [{"type": "text", "text": text}]
    for block in content:
        if isinstance(block, str):
            continue
        if isinstance(block, dict) and block.get("type") == "text":
            continue
        blocks.append(block)
    return message.model_copy(update={"content": blocks})


def _is_large_write(message: Any, min_chars: int) -> bool:
    """Whether a write call of ``message`` carries content long enough to be elided."""
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            args = call.get("args")
            if call.get("name") in _WRITE_TOOLS and isinstance(args, dict):
                content = args.get("content")
                if isinstance(content, str) and len(content) >= max(min_chars, 1):
                    return True
    return False


def _normalize_path(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return posixpath.normpath(value.strip())


class ToolOutputBudgetMiddleware(AgentMiddleware[Any, Any]):
    """Keep oversized tool output out of state and model requests (see module docs)."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        config: ToolOutputConfig,
        *,
        data_root: Path,
        settings: Settings | None = None,
        provider: SandboxProvider | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.data_root = data_root
        # With settings, outputs go through the run's sandbox when its files
        # are not this host's (spec 2: readable where read_file runs).
        self._settings = settings
        self._provider = provider
        # The model-side checks run before every model call over the whole history:
        # resumed per history, they cost only the messages added since the last call.
        self._over_budget_count = prefix_count(self._over_budget)
        self._large_writes = prefix_count(
            lambda m: _is_large_write(m, self.config.superseded_write_min_chars)
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolOutputBudgetMiddleware:
        return cls(settings.tool_output, data_root=settings.data_root_path(), settings=settings)

    def release_policy_parameters(self) -> dict[str, Any]:
        return self.config.model_dump(mode="json")

    # --- shared -------------------------------------------------------------

    def _outputs_dir(self, runtime: Any) -> Path | None:
        thread_id = _current_thread_id(runtime)
        if thread_id is None:
            return None
        try:
            return thread_paths(self.data_root, resolve_runtime_user_id(runtime), thread_id).outputs
        except ValueError:
            logger.warning(
                "tool output budget: unsafe thread id %r; keeping output inline", thread_id
            )
            return None

    def _over_budget(self, message: Any) -> bool:
        return (
            isinstance(message, ToolMessage)
            and message.name not in self.config.exempt_tools
            and len(tool_message_text(message)) > self.config.max_chars
        )

    def _budget_message(
        self,
        message: ToolMessage,
        outputs_dir: Path | None,
        *,
        tool_side: bool,
        written: ExternalizedOutput | str | None = None,
    ) -> ToolMessage:
        """Externalise one oversized message; fall back inline on failure.

        ``written``: the output already saved through the sandbox, or why it
        could not be (a reason string); None means "save on the host".
        """
        text = tool_message_text(message)
        tool_name = message.name or "tool"
        reason: str
        saved: ExternalizedOutput | None = None
        if isinstance(written, ExternalizedOutput):
            saved = written
        elif isinstance(written, str):
            reason = written
        elif outputs_dir is None:
            reason = "no thread is known for this run"
        else:
            try:
                saved = externalize_output(
                    text,
                    tool_name=tool_name,
                    tool_call_id=message.tool_call_id,
                    outputs_dir=outputs_dir,
                    config=self.config,
                )
            except (OSError, UnicodeError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                logger.warning(
                    "tool output budget: cannot save output of %s: %s", tool_name, reason
                )
        if saved is not None:
            budgeted = _replace_text(message, saved.synopsis)
            if tool_side:
                kwargs = dict(budgeted.additional_kwargs or {})
                kwargs[TOOL_OUTPUT_KEY] = {
                    "virtual_path": saved.virtual_path,
                    "chars": saved.chars,
                    "bytes": saved.bytes,
                    "kind": saved.kind,
                    "records": saved.records,
                }
                budgeted = budgeted.model_copy(update={"additional_kwargs": kwargs})
            return append_tool_transform(
                budgeted,
                kind="externalize",
                producer=self.name,
                details={"virtual_path": saved.virtual_path, "chars": saved.chars},
            )
        return self._inline_fallback(message, text, reason, tool_side=tool_side)

    def _inline_fallback(
        self, message: ToolMessage, text: str, reason: str, *, tool_side: bool
    ) -> ToolMessage:
        limit = self.config.inline_fallback_max_chars if tool_side else self.config.max_chars
        if len(text) <= limit:
            return message
        shape = describe_output(text)
        half = max(1, (limit - 600) // 2)
        note = (
            f"The full output could not be saved ({reason}); only this part is kept."
            if tool_side
            else f"The full output is kept in the conversation but could not be saved ({reason})."
        )
        head, tail = head_tail(text, half, half)
        synopsis = render_synopsis(
            text,
            tool_name=message.name or "tool",
            shape=shape,
            head_chars=len(head),
            tail_chars=len(tail),
            virtual_path=None,
            total_bytes=None,
            note=note,
        )
        return append_tool_transform(
            _replace_text(message, synopsis),
            kind="inline_fallback",
            producer=self.name,
            details={"chars": len(text), "reason": reason},
        )

    # --- tool side ------------------------------------------------------------

    def _needs_tool_budget(self, request: ToolCallRequest, result: Any) -> bool:
        call_id = request.tool_call.get("id")
        messages: list[Any] = []
        if isinstance(result, ToolMessage):
            messages = [result]
        elif isinstance(result, Command) and isinstance(result.update, dict):
            found = result.update.get("messages")
            messages = found if isinstance(found, list) else []
        return any(
            self._over_budget(m) for m in messages if getattr(m, "tool_call_id", None) == call_id
        )

    def _apply_tool_budget(self, request: ToolCallRequest, result: Any) -> Any:
        outputs_dir = self._outputs_dir(request.runtime)

        def budget(message: ToolMessage) -> ToolMessage:
            if not self._over_budget(message):
                return message
            return self._budget_message(message, outputs_dir, tool_side=True)

        return map_tool_messages(result, budget, tool_call_id=request.tool_call.get("id"))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        result = handler(request)
        if not self.config.enabled or not self._needs_tool_budget(request, result):
            return result
        return self._apply_tool_budget(request, result)  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        if not self.config.enabled or not self._needs_tool_budget(request, result):
            return result
        sandbox = await self._remote_sandbox(request)
        if sandbox is not None:
            return await self._apply_sandbox_budget(request, result, sandbox)  # type: ignore[no-any-return]
        return await asyncio.to_thread(self._apply_tool_budget, request, result)  # type: ignore[no-any-return]

    def _files_elsewhere(self, state: Any) -> bool:
        """Whether the run's known sandbox keeps its files off this host (no acquisition)."""
        if self._settings is None:
            return False
        sandbox_id = state_sandbox_id(state)
        if not sandbox_id:
            return False
        try:
            provider = self._provider or get_sandbox_provider(self._settings)
            sandbox = provider.get(sandbox_id)
        except Exception:  # a provider that cannot be built: keep the host path
            logger.debug("tool output budget: cannot look up sandbox %s", sandbox_id)
            return False
        return sandbox is not None and not sandbox.shares_host_user_data

    async def _remote_sandbox(self, request: ToolCallRequest) -> Sandbox | str | None:
        """The run's sandbox when its files are not this host's; a reason when it is unavailable.

        None: the host's thread directory is where ``read_file`` looks (the local
        provider), so the host write is right.
        """
        if self._settings is None:
            return None
        try:
            binding = await resolve_binding(
                self._settings, request.state, request.runtime, provider=self._provider
            )
        except SandboxError as exc:
            return f"the sandbox is unavailable: {exc}"
        return None if binding.sandbox.shares_host_user_data else binding.sandbox

    async def _apply_sandbox_budget(
        self, request: ToolCallRequest, result: Any, sandbox: Sandbox | str
    ) -> Any:
        call_id = request.tool_call.get("id")
        pending: list[ToolMessage] = []

        def collect(message: ToolMessage) -> ToolMessage:
            if self._over_budget(message):
                pending.append(message)
            return message

        map_tool_messages(result, collect, tool_call_id=call_id)
        written: dict[int, ExternalizedOutput | str] = {}
        for message in pending:
            if isinstance(sandbox, str):
                written[id(message)] = sandbox
                continue
            try:
                written[id(message)] = await externalize_output_to_sandbox(
                    tool_message_text(message),
                    tool_name=message.name or "tool",
                    tool_call_id=message.tool_call_id,
                    sandbox=sandbox,
                    config=self.config,
                )
            except (SandboxError, OSError, UnicodeError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                logger.warning("tool output budget: cannot save output in the sandbox: %s", reason)
                written[id(message)] = reason

        def budget(message: ToolMessage) -> ToolMessage:
            if id(message) not in written:
                return message
            return self._budget_message(message, None, tool_side=True, written=written[id(message)])

        return map_tool_messages(result, budget, tool_call_id=call_id)

    # --- model side -----------------------------------------------------------

    def _elisions(self, messages: Sequence[AnyMessage]) -> dict[int, dict[str, dict[str, Any]]]:
        """Superseded writes to elide: ai index -> call id -> new args."""
        if not self.config.elide_superseded_writes:
            return {}
        if not self._large_writes(messages):
            return {}  # the common case, without pairing the whole history
        pairs = [
            p
            for p in pair_tool_call_results(messages)
            if p.result is not None and p.result.status != "error" and isinstance(p.call.args, dict)
        ]
        writes = [p for p in pairs if p.call.name in _WRITE_TOOLS]
        keep_from = max(0, len(writes) - self.config.keep_recent_writes)
        protected = {id(p) for p in writes[keep_from:]}
        plan: dict[int, dict[str, dict[str, Any]]] = {}
        for position, write in enumerate(pairs):
            if write.call.name not in _WRITE_TOOLS or id(write) in protected:
                continue
            args: dict[str, Any] = write.call.args
            path = _normalize_path(args.get("path"))
            content = args.get("content")
            if path is None or not isinstance(content, str) or write.call.id is None:
                continue
            if len(content) < max(self.config.superseded_write_min_chars, 1):
                continue
            later = next(
                (
                    p
                    for p in pairs[position + 1 :]
                    if p.call.name in _SUPERSEDING_TOOLS
                    and isinstance(p.call.args, dict)
                    and _normalize_path(p.call.args.get("path")) == path
                ),
                None,
            )
            if later is None:
                continue
            placeholder = (
                f"[elided: {len(content):,} characters written to {path}; a later "
                f"{later.call.name} of the same file supersedes it, and the file is the reference]"
            )
            plan.setdefault(write.ai_index, {})[write.call.id] = {**args, "content": placeholder}
        return plan

    def _needs_model_budget(self, request: ModelRequest[Any]) -> bool:
        return self._over_budget_count(request.messages) > 0 or bool(
            self._elisions(request.messages)
        )

    def _budget_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        plan = self._elisions(request.messages)
        outputs_dir: Path | None = None
        remote: str | None = None
        if any(self._over_budget(m) for m in request.messages):
            if self._files_elsewhere(request.state):
                # read_file would not find a host file: keep the output inline.
                remote = "the sandbox's files are not on this host"
            else:
                outputs_dir = self._outputs_dir(request.runtime)
        messages: list[AnyMessage] = []
        for index, message in enumerate(request.messages):
            if index in plan and isinstance(message, AIMessage):
                for call_id, args in plan[index].items():
                    message = rewrite_tool_call_args(message, call_id, args)
            elif self._over_budget(message):
                message = self._budget_message(
                    message,  # type: ignore[arg-type]
                    outputs_dir,
                    tool_side=False,
                    written=remote,
                )
            messages.append(message)
        return request.override(messages=messages)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        if self.config.enabled and self._needs_model_budget(request):
            request = self._budget_request(request)
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        if self.config.enabled and self._needs_model_budget(request):
            request = await asyncio.to_thread(self._budget_request, request)
        return await handler(request)
