"""DeferredToolPromotionAuditMiddleware (spec 28): audit what ``tool_search`` promoted, once.

It observes the final ``Command`` of each ``tool_search`` call and atomically
claims the newly promoted names for the run, so parallel searches that find the
same tool report it once. A subagent execution has its own chain, so its own
claims; its events and log lines carry ``is_subagent: true``. Each new claim emits ``middleware:tool_promotion``
with ``source: tool_search`` and logs one line; the ``Command`` is returned
unchanged, and no search text or tool payload goes into the audit.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from middlewares._run_scope import current_run_key, emit_event, is_subagent_run
from tools.deferred import PROMOTION_EVENT

__all__ = ["DeferredToolPromotionAuditMiddleware"]

logger = logging.getLogger("deerflow.tool_promotion")
ToolResult = ToolMessage | Command[Any]
_MAX_RUNS = 1024


class DeferredToolPromotionAuditMiddleware(AgentMiddleware[Any, Any]):
    """Claim and report each tool_search promotion once per run."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    def __init__(self, *, tool_name: str = "tool_search") -> None:
        super().__init__()
        self._tool_name = tool_name
        self._lock = threading.Lock()
        self._claimed: OrderedDict[tuple[str, str], set[str]] = OrderedDict()

    def _observe(self, result: ToolResult) -> ToolResult:
        if not isinstance(result, Command) or not isinstance(result.update, dict):
            return result
        promoted = result.update.get("promoted")
        if not isinstance(promoted, dict) or not promoted:
            return result
        key = current_run_key()
        with self._lock:
            claimed = self._claimed.setdefault(key, set())
            self._claimed.move_to_end(key)
            while len(self._claimed) > _MAX_RUNS:
                self._claimed.popitem(last=False)
            new = sorted(name for name in promoted if name not in claimed)
            claimed.update(new)
        if new:
            event: dict[str, Any] = {"type": PROMOTION_EVENT, "source": "tool_search", "names": new}
            record: dict[str, Any] = {"thread_id": key[0], "run_id": key[1], "names": new}
            if is_subagent_run():  # attribution from the server-set run metadata
                event["is_subagent"] = record["is_subagent"] = True
            emit_event(event)
            logger.info("tool promotion %s", json.dumps(record))
        return result

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        result = handler(request)
        return self._observe(result) if request.tool_call.get("name") == self._tool_name else result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        result = await handler(request)
        return self._observe(result) if request.tool_call.get("name") == self._tool_name else result
