"""MemoryMiddleware (spec 25): queue the finished conversation for memory extraction.

It does nothing on the request path but hand a job to the background queue
(``memory.queue``) after a lead run: the user's own turns and the run's final
answer, with the user the run resolved (``resolve_runtime_user_id``) so reads
and writes land in the same store bucket. The queue debounces per thread, is
bounded, and runs extraction later; a failure there is logged and changes
nothing. Subagent runs never write memory, and a run that opts out
(``memory_enabled: false``) is not queued. Recall is DynamicContext's job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.runtime import Runtime

from auth.identity import resolve_runtime_user_id
from memory.extraction import extract_memories
from memory.queue import MemoryJob, MemoryQueue, get_memory_queue
from middlewares._run_scope import is_subagent_run
from middlewares._text import content_text
from sandbox.session import thread_id_of

__all__ = ["MemoryMiddleware", "conversation_turns"]

logger = logging.getLogger("deerflow.memory")

_MAX_TURNS = 40


def _user_text(message: HumanMessage) -> str | None:
    kwargs = message.additional_kwargs or {}
    if kwargs.get("hide_from_ui") or kwargs.get("deerflow_content_kind"):
        return None
    original = kwargs.get("original_user_content")
    text = original if isinstance(original, str) else content_text(message.content)
    return text.strip() or None


def conversation_turns(messages: Sequence[BaseMessage]) -> list[tuple[str, str]]:
    """The user's own turns and the final answer: what extraction reads (no tools, no hidden)."""
    turns: list[tuple[str, str]] = []
    for message in messages:
        if isinstance(message, HumanMessage) and (text := _user_text(message)):
            turns.append(("user", text))
    final = next(
        (m for m in reversed(messages) if isinstance(m, AIMessage) and not m.tool_calls), None
    )
    if final is not None and (answer := content_text(final.content).strip()):
        turns.append(("assistant", answer))
    return turns[-_MAX_TURNS:]


class MemoryMiddleware(AgentMiddleware[Any, Any]):
    """Submit the conversation to the extraction queue after each lead run.

    Args:
        model_factory: builds the extraction model when a job runs (not per run).
        max_memory_chars: longest memory text kept.
        max_memories: memories kept per user (oldest dropped beyond).
        indexed: the store has an embedding index (semantic recall).
        redact: applied to memory text on admission (PII redaction), or None.
        queue: the queue (the process's by default).
        extraction_timeout: seconds one extraction may take.
    """

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        model_factory: Callable[[], BaseChatModel],
        max_memory_chars: int = 500,
        max_memories: int = 1000,
        indexed: bool = False,
        redact: Callable[[str], str] | None = None,
        queue: MemoryQueue | None = None,
        extraction_timeout: float = 60.0,
    ) -> None:
        super().__init__()
        self._model_factory = model_factory
        self._max_chars = max_memory_chars
        self._max_memories = max_memories
        self._indexed = indexed
        self._redact = redact
        self._queue = queue or get_memory_queue()
        self._timeout = extraction_timeout

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "max_memory_chars": self._max_chars,
            "max_memories": self._max_memories,
            "semantic": self._indexed,
            "redacted": self._redact is not None,
        }

    def _job(self, state: Any, runtime: Runtime[Any]) -> MemoryJob | None:
        if is_subagent_run():
            return None
        store = getattr(runtime, "store", None)
        if store is None:
            logger.debug("memory: no store attached to this run; nothing queued")
            return None
        turns = conversation_turns((state or {}).get("messages") or [])
        if not any(role == "user" for role, _ in turns):
            return None
        user_id = resolve_runtime_user_id(runtime)
        thread_id = thread_id_of(runtime) or "-"

        async def run() -> None:
            result = await asyncio.wait_for(
                extract_memories(
                    self._model_factory(),
                    store,
                    user_id,
                    turns,
                    thread_id=thread_id,
                    max_chars=self._max_chars,
                    max_memories=self._max_memories,
                    indexed=self._indexed,
                    redact=self._redact,
                ),
                self._timeout,
            )
            if result.error:
                logger.warning("memory extraction for thread %s: %s", thread_id, result.error)
            else:
                logger.info(
                    "memory extraction for thread %s: %d added, %d updated, %d removed",
                    thread_id,
                    result.added,
                    result.updated,
                    result.removed,
                )

        return MemoryJob(user_id=user_id, thread_id=thread_id, run=run)

    def after_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return None  # the queue runs on the server's event loop: async runs only

    async def aafter_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        try:
            job = self._job(state, runtime)
        except Exception:  # never fail a run over memory
            logger.exception("memory: could not queue the conversation")
            return None
        if job is not None:
            self._queue.submit(job)
        return None
