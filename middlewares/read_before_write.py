"""ReadBeforeWriteMiddleware (spec 13): no write to an existing file without a fresh read.

An existing file may be changed by ``write_file`` (append included) or
``str_replace`` only after a ``read_file`` of its *newest* content. This stops
the "append-only, never read back" failure (the same section written five
times) and blind overwrites of a file that changed under the model.

Design:

- **Marks live on messages.** After a successful ``read_file``, the file's
  current content hash is stamped on the read's ``ToolMessage`` (the one whose
  ``tool_call_id`` is the request's, including inside a ``Command``) under
  ``deerflow_read_mark``. The gate state is therefore the conversation itself:
  dropping a read (summarization) drops its mark, and writes never refresh a
  mark, so every write invalidates earlier reads.
- **The file is hashed, not the tool's output**, through an injectable
  ``ContentProbe`` (``middlewares/_content_probe.py``); a read of an older
  version never authorises a write of the newer one.
- **One gate per (scope, path)** serializes read + mark and check + write,
  from sync hooks (threads) and async hooks (any loop) alike, so two writes in
  one model turn cannot both pass on one mark.
- **Uninspectable content fails open**: if the probe cannot read the file,
  the write goes ahead and the tool reports its own error.
- **Blocked calls** return an error ``ToolMessage`` stamped with
  ``deerflow_tool_meta`` and ``deerflow_write_block`` = ``{path, tool}``.
  Their payloads are dead weight, so ``wrap_model_call`` replaces them with
  deterministic placeholders in the model-bound request only (state keeps the
  original arguments).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from auth.identity import resolve_runtime_user_id
from middlewares._content_probe import (
    ContentProbe,
    HostPathContentProbe,
    ProbeTarget,
    SandboxContentProbe,
    normalize_virtual_path,
)
from middlewares._path_gate import _await_off_thread, gate_for
from middlewares._prefix_fold import prefix_count
from middlewares._tool_meta import blocked_tool_message
from middlewares.tool_call_args import pair_tool_call_results, rewrite_tool_call_args
from runtime.config import ReadBeforeWriteConfig, Settings
from sandbox.base import SandboxError
from sandbox.provider import get_sandbox_provider

__all__ = [
    "READ_MARK_KEY",
    "WRITE_BLOCK_KEY",
    "ContentProbe",
    "HostPathContentProbe",
    "ProbeTarget",
    "ReadBeforeWriteMiddleware",
    "SandboxContentProbe",
    "default_content_probe",
    "elide_blocked_write_payloads",
]

logger = logging.getLogger(__name__)

READ_MARK_KEY = "deerflow_read_mark"
WRITE_BLOCK_KEY = "deerflow_write_block"

READ_TOOL = "read_file"
GATED_WRITE_TOOLS = frozenset({"write_file", "str_replace"})
# The bulk of each gated call; path, description and flags stay visible.
_PAYLOAD_FIELDS: dict[str, tuple[str, ...]] = {
    "write_file": ("content",),
    "str_replace": ("old_str", "new_str"),
}
# Deterministic for a given payload, so repeated requests keep one prefix.
_ELIDED_TEMPLATE = (
    "[elided: {chars} characters; this {tool} call was blocked by the read-before-write "
    "gate and nothing was written]"
)
# read_file results that carry no file content (tool errors reported in-band).
_NO_CONTENT_PREFIXES = ("Error:", "error:")
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _log_uninspectable(target: ProbeTarget, exc: Exception) -> None:
    """Expected refusals (paths outside the roots, no sandbox) are not incidents."""
    if isinstance(exc, (SandboxError, OSError)):
        logger.info("read-before-write: cannot inspect %s (%s); failing open", target.path, exc)
    else:
        logger.warning(
            "read-before-write: cannot inspect %s; failing open", target.path, exc_info=exc
        )


def default_content_probe(settings: Settings) -> ContentProbe:
    """The probe the assembled chain uses: the run's own sandbox, any provider.

    Files are hashed through ``Sandbox.download_bytes`` of the sandbox that
    SandboxMiddleware bound for this tool call (owner-checked), so the local
    and the Kubernetes provider are probed the same way; a missing file is
    ``SandboxNotFoundError``, a ``FileNotFoundError``.
    """
    return SandboxContentProbe(lambda: get_sandbox_provider(settings))


class ReadBeforeWriteMiddleware(AgentMiddleware[Any, Any, Any]):
    """Block writes to existing files whose newest content was not read."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        probe: ContentProbe,
        config: ReadBeforeWriteConfig | None = None,
    ) -> None:
        super().__init__()
        self._probe = probe
        self._config = config if config is not None else ReadBeforeWriteConfig()

    @classmethod
    def from_settings(cls, settings: Settings) -> ReadBeforeWriteMiddleware:
        return cls(probe=default_content_probe(settings), config=settings.read_before_write)

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "config": self._config.model_dump(mode="json"),
            "read_tool": READ_TOOL,
            "gated_tools": sorted(GATED_WRITE_TOOLS),
        }

    # -- request analysis --------------------------------------------------

    def _plan(
        self, request: ToolCallRequest
    ) -> tuple[Literal["read", "write"], ProbeTarget] | None:
        name = request.tool_call.get("name")
        if name == READ_TOOL:
            kind: Literal["read", "write"] = "read"
        elif name in GATED_WRITE_TOOLS:
            kind = "write"
        else:
            return None
        args = request.tool_call.get("args")
        path = args.get("path") if isinstance(args, dict) else None
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            return None  # the tool rejects it with its own error
        return kind, self._target(request, normalize_virtual_path(path))

    @staticmethod
    def _target(request: ToolCallRequest, path: str) -> ProbeTarget:
        runtime = request.runtime
        config = getattr(runtime, "config", None)
        configurable = config.get("configurable") if isinstance(config, Mapping) else None
        thread_id = (configurable or {}).get("thread_id")
        state = request.state
        sandbox = state.get("sandbox") if isinstance(state, Mapping) else None
        sandbox_id = sandbox.get("sandbox_id") if isinstance(sandbox, Mapping) else None
        return ProbeTarget(
            path=path,
            user_id=resolve_runtime_user_id(runtime),
            thread_id=str(thread_id) if thread_id else None,
            sandbox_id=sandbox_id if isinstance(sandbox_id, str) and sandbox_id else None,
            runtime=runtime,
        )

    # -- probing -----------------------------------------------------------

    def _probe_sync(self, target: ProbeTarget) -> str | None:
        try:
            return self._checked_digest(self._probe.digest(target), target)
        except FileNotFoundError:
            return None
        except Exception as exc:
            _log_uninspectable(target, exc)
            return None

    async def _probe_async(self, target: ProbeTarget) -> str | None:
        task = asyncio.ensure_future(self._probe.adigest(target))
        try:
            return self._checked_digest(await _await_off_thread(task), target)
        except FileNotFoundError:
            return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _log_uninspectable(target, exc)
            return None

    @staticmethod
    def _checked_digest(value: Any, target: ProbeTarget) -> str | None:
        if isinstance(value, str) and _HEX_DIGEST.match(value):
            return value
        logger.warning("read-before-write: probe gave no usable digest for %s", target.path)
        return None

    # -- the write gate -------------------------------------------------------

    @staticmethod
    def _latest_mark(state: Any, path: str) -> str | None:
        """The newest valid read mark for ``path`` in the conversation.

        A mark counts only on the ``ToolMessage`` answering a ``read_file`` call
        of the same path with the same id, so stray or copied metadata cannot
        authorise a write.
        """
        messages = state.get("messages") if isinstance(state, Mapping) else None
        if not isinstance(messages, list):
            return None
        read_calls: dict[str, str] = {}
        for message in messages:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    args = call.get("args")
                    call_path = args.get("path") if isinstance(args, dict) else None
                    if (
                        call.get("name") == READ_TOOL
                        and isinstance(call_path, str)
                        and call.get("id")
                    ):
                        read_calls[str(call["id"])] = normalize_virtual_path(call_path)
        for message in reversed(messages):
            if not isinstance(message, ToolMessage):
                continue
            mark = (message.additional_kwargs or {}).get(READ_MARK_KEY)
            if (
                isinstance(mark, dict)
                and mark.get("path") == path
                and mark.get("tool_call_id") == message.tool_call_id
                and read_calls.get(message.tool_call_id) == path
                and isinstance(mark.get("hash"), str)
            ):
                return str(mark["hash"])
        return None

    def _decide(
        self, request: ToolCallRequest, target: ProbeTarget, current: str | None
    ) -> ToolMessage | None:
        """None lets the write run; otherwise the blocked result."""
        if current is None:
            return None  # a new file, or content the gate cannot inspect (fail open)
        seen = self._latest_mark(request.state, target.path)
        if seen == current:
            return None
        tool = str(request.tool_call.get("name"))
        if seen is None:
            why = "you have not read it in this conversation"
        else:
            why = "it changed after your last read_file of it"
        logger.info("read-before-write: blocked %s of %s (%s)", tool, target.path, why)
        return blocked_tool_message(
            content=(
                f"Error: {tool} blocked: {target.path} already exists and {why}. "
                f"Call read_file on {target.path} first, check what is already there, "
                f"then retry the {tool} call. Nothing was written. Every write changes the "
                "file, so read it again before each further modification."
            ),
            tool_call_id=str(request.tool_call.get("id") or ""),
            name=tool,
            error_type="read_required",
            source="read_before_write",
            extra_kwargs={WRITE_BLOCK_KEY: {"path": target.path, "tool": tool}},
        )

    # -- read marks -------------------------------------------------------------

    @staticmethod
    def _answer_of(request: ToolCallRequest, result: Any) -> ToolMessage | None:
        """The ToolMessage answering this request's ``tool_call_id`` (direct or in a Command)."""
        call_id = request.tool_call.get("id")
        if isinstance(result, ToolMessage):
            candidates = [result]
        elif isinstance(result, Command) and isinstance(result.update, Mapping):
            messages = result.update.get("messages")
            candidates = [m for m in messages or [] if isinstance(m, ToolMessage)]
        else:
            candidates = []
        for message in candidates:
            if message.tool_call_id == call_id:
                return message
        logger.info(
            "read-before-write: no ToolMessage answers read_file tool_call_id=%s; no mark",
            call_id,
        )
        return None

    @staticmethod
    def _carries_content(message: ToolMessage) -> bool:
        if message.status == "error":
            return False
        content = message.content
        return not (isinstance(content, str) and content.lstrip().startswith(_NO_CONTENT_PREFIXES))

    @staticmethod
    def _with_mark(result: Any, message: ToolMessage, target: ProbeTarget, digest: str) -> Any:
        marked = message.model_copy(
            update={
                "additional_kwargs": {
                    **(message.additional_kwargs or {}),
                    READ_MARK_KEY: {
                        "path": target.path,
                        "hash": digest,
                        "tool_call_id": message.tool_call_id,
                    },
                }
            }
        )
        if isinstance(result, ToolMessage):
            return marked
        assert isinstance(result, Command) and isinstance(result.update, Mapping)
        messages = [marked if m is message else m for m in result.update.get("messages") or []]
        return replace(result, update={**result.update, "messages": messages})

    # -- tool hooks ---------------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        plan = self._plan(request)
        if plan is None:
            return handler(request)
        kind, target = plan
        with gate_for(target.scope, target.path).hold():
            if kind == "write":
                blocked = self._decide(request, target, self._probe_sync(target))
                return blocked if blocked is not None else handler(request)
            result = handler(request)
            message = self._answer_of(request, result)
            if message is None or not self._carries_content(message):
                return result
            digest = self._probe_sync(target)
            return result if digest is None else self._with_mark(result, message, target, digest)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        plan = self._plan(request)
        if plan is None:
            return await handler(request)
        kind, target = plan
        async with gate_for(target.scope, target.path).ahold():
            if kind == "write":
                blocked = self._decide(request, target, await self._probe_async(target))
                return blocked if blocked is not None else await handler(request)
            result = await handler(request)
            message = self._answer_of(request, result)
            if message is None or not self._carries_content(message):
                return result
            digest = await self._probe_async(target)
            return result if digest is None else self._with_mark(result, message, target, digest)

    # -- model-bound elision -------------------------------------------------------

    def _elide(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        if not self._config.elide_blocked_payloads:
            return request
        patched = elide_blocked_write_payloads(
            request.messages, min_chars=self._config.elide_min_chars
        )
        return request if patched is None else request.override(messages=patched)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        return handler(self._elide(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        # A pure in-memory rewrite: no I/O, so it stays on the loop.
        return await handler(self._elide(request))


def _elided_args(args: dict[str, Any], tool: str, min_chars: int) -> dict[str, Any] | None:
    elided: dict[str, Any] | None = None
    for name in _PAYLOAD_FIELDS.get(tool, ()):
        value = args.get(name)
        if isinstance(value, str) and value and len(value) >= min_chars:
            elided = dict(args) if elided is None else elided
            elided[name] = _ELIDED_TEMPLATE.format(chars=len(value), tool=tool)
    return elided


# Blocked-write results in a history, resumed per history (checked every model call).
_blocked_writes = prefix_count(
    lambda m: isinstance(m, ToolMessage) and WRITE_BLOCK_KEY in (m.additional_kwargs or {})
)


def elide_blocked_write_payloads(
    messages: Sequence[AnyMessage], *, min_chars: int
) -> list[AnyMessage] | None:
    """``messages`` with gate-blocked write payloads replaced by placeholders, or ``None``.

    A call qualifies when the ToolMessage answering that occurrence (pairing is
    per occurrence, so a reused id is not confused with another call) carries a
    well-formed ``deerflow_write_block`` naming the same tool. The rewrite goes
    through ``tool_call_args`` (every field adapters resend) and never mutates
    its input.
    """
    if not _blocked_writes(messages):
        return None  # nothing was blocked: skip pairing the whole history
    replacements: dict[int, dict[str, dict[str, Any]]] = {}
    for pair in pair_tool_call_results(messages):
        call, result = pair.call, pair.result
        entry = (result.additional_kwargs or {}).get(WRITE_BLOCK_KEY) if result else None
        if not isinstance(entry, dict) or entry.get("tool") != call.name or call.id is None:
            continue
        if not isinstance(call.args, dict):
            continue
        elided = _elided_args(call.args, str(call.name), min_chars)
        if elided is not None:
            replacements.setdefault(pair.ai_index, {})[call.id] = elided
    if not replacements:
        return None
    out = list(messages)
    for index, calls in replacements.items():
        message = out[index]
        assert isinstance(message, AIMessage)
        for call_id, args in calls.items():
            message = rewrite_tool_call_args(message, call_id, args)
        out[index] = message
    return out
