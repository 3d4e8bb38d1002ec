"""SandboxMiddleware (spec number 7): the sandbox's lifecycle and its id in state.

- ``before_agent``: nothing by default (``sandbox.lazy_init: true``); with lazy
  init off it acquires eagerly and stores ``sandbox_id``. An eager failure is
  logged and left to the lazy path instead of failing the run.
- ``wrap_tool_call``: for sandbox tools (metadata ``deerflow_sandbox_tool``) it
  resolves the sandbox right before the first one runs (state's id if the
  provider still holds it for this user and thread, else ``acquire``), binds
  it for the call, and when the id is new, persists it to state through the
  tool result's ``Command`` (a tool cannot write state by mutating it).
  Acquisition failures become an error ``ToolMessage`` that carries its own
  ``deerflow_tool_meta`` (``transient``, source ``sandbox``) and, with receipts
  on, its own receipt: this short-circuit sits outer of ToolReceipt and
  ToolErrorHandling, so neither would see it and the ledger would gap.
- ``after_agent``: releases the run's sandbox (the provider may keep it warm).

With authorization on, ``sandbox:execute`` is checked before every acquisition
(spec 7): the eager path skips on deny and leaves the decision to the per-tool
path, where a denied user's file and shell tools get a
``SandboxAuthorizationError`` as an error result, and no sandbox (no directory,
no pod) is ever created for them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from auth.identity import resolve_runtime_user_id
from authz.provider import FailClosedAuthorizer
from authz.sandbox_gate import check_sandbox_authorization
from middlewares.tool_receipt import RECEIPT_KEY, make_receipt
from middlewares.tool_result_meta import normalize_tool_result
from runtime.config import Settings
from runtime.state import ThreadState
from sandbox.base import SandboxError, SandboxProvider
from sandbox.provider import get_sandbox_provider
from sandbox.session import (
    bind_sandbox,
    resolve_binding,
    safe_thread_id,
    state_sandbox_id,
    thread_id_of,
)
from tools import is_sandbox_tool

__all__ = ["SandboxMiddleware"]

logger = logging.getLogger(__name__)

ToolResult = ToolMessage | Command[Any]


def _error_message(
    request: ToolCallRequest,
    text: str,
    *,
    error_type: str = "transient",
    receipts: bool = False,
) -> ToolMessage:
    """A self-stamped error result (meta, and a receipt when receipts are on)."""
    message = normalize_tool_result(
        ToolMessage(
            content=f"Error: {text}",
            tool_call_id=request.tool_call.get("id") or "",
            name=request.tool_call.get("name"),
            status="error",
        ),
        source="sandbox",
        error_type=error_type,
    )
    if not receipts:
        return message
    receipt = make_receipt(
        message,
        tool_name=str(request.tool_call.get("name") or "tool"),
        args=request.tool_call.get("args"),
        timestamp=datetime.now(UTC),
    )
    kwargs = {**(message.additional_kwargs or {}), RECEIPT_KEY: receipt}
    return message.model_copy(update={"additional_kwargs": kwargs})


def _with_sandbox_id(result: ToolResult, sandbox_id: str) -> ToolResult:
    """Carry ``sandbox_id`` into state alongside the tool's own result."""
    update = {"sandbox": {"sandbox_id": sandbox_id}}
    if isinstance(result, ToolMessage):
        return Command(update={**update, "messages": [result]})
    if isinstance(result, Command):
        if result.update is None:
            return dataclasses.replace(result, update=update)
        if isinstance(result.update, dict):
            return dataclasses.replace(result, update={**update, **result.update})
    logger.warning("cannot persist sandbox %s: unexpected tool result shape", sandbox_id)
    return result


class SandboxMiddleware(AgentMiddleware[ThreadState, Any]):
    """Lazy acquisition on the first sandbox tool call; release after the run."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    state_schema = ThreadState

    def __init__(
        self,
        settings: Settings,
        *,
        lazy_init: bool | None = None,
        provider: SandboxProvider | None = None,
        authorizer: FailClosedAuthorizer | None = None,
    ) -> None:
        super().__init__()
        self._settings = settings
        self._authorizer = authorizer
        self.lazy_init = settings.sandbox.lazy_init if lazy_init is None else lazy_init
        self._provider = provider
        self._receipts = settings.verification.receipts_enabled

    @property
    def provider(self) -> SandboxProvider:
        if self._provider is None:
            self._provider = get_sandbox_provider(self._settings)
        return self._provider

    # --- before_agent ------------------------------------------------------------

    def before_agent(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if not self.lazy_init:
            logger.info("eager sandbox acquisition needs async execution; acquiring lazily")
        return None

    async def abefore_agent(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if self.lazy_init:
            return None
        try:
            await check_sandbox_authorization(self._authorizer, runtime)
            binding = await resolve_binding(self._settings, state, runtime, provider=self.provider)
        except SandboxError as exc:
            logger.warning("eager sandbox acquisition failed (will retry lazily): %s", exc)
            return None
        if binding.needs_persist:
            return {"sandbox": {"sandbox_id": binding.sandbox.id}}
        return None

    # --- wrap_tool_call ----------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        if not is_sandbox_tool(request.tool):
            return handler(request)
        return _error_message(
            request,
            "sandbox tools run only when the agent is executed asynchronously",
            error_type="unsupported",
            receipts=self._receipts,
        )

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        if not is_sandbox_tool(request.tool):
            return await handler(request)
        try:
            await check_sandbox_authorization(self._authorizer, request.runtime)
            binding = await resolve_binding(
                self._settings, request.state, request.runtime, provider=self.provider
            )
        except SandboxError as exc:
            denied = isinstance(exc, PermissionError)
            return _error_message(
                request,
                str(exc) if denied else f"the sandbox is unavailable: {exc}",
                error_type="permission_denied" if denied else "transient",
                receipts=self._receipts,
            )
        with bind_sandbox(binding):
            result = await handler(request)
        if binding.needs_persist:
            result = _with_sandbox_id(result, binding.sandbox.id)
        return result

    # --- after_agent -------------------------------------------------------------

    def after_agent(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return None

    async def aafter_agent(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        sandbox_id = state_sandbox_id(state)
        raw_thread = thread_id_of(runtime)
        if not sandbox_id or not raw_thread:
            return None
        sandbox = self.provider.get(sandbox_id)
        if sandbox is None or not sandbox.belongs_to(
            resolve_runtime_user_id(runtime), safe_thread_id(raw_thread)
        ):
            return None
        try:
            await self.provider.release(sandbox_id)
        except Exception:
            logger.warning("releasing sandbox %s failed", sandbox_id, exc_info=True)
        return None
