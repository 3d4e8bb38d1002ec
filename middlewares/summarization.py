"""SummarizationMiddleware (spec 000, number 21): keep a long thread inside the context window.

Built on LangChain's ``SummarizationMiddleware``, which already does the parts
that fit: the token trigger, the token-based keep cutoff that never splits an
AI message from its tool results (``_find_safe_cutoff_point``), trimming the
summary input and generating the summary with retries (an optional summary
model only generates). What DeerFlow needs beyond it, and why it is done here:

- **Where it runs**: LangChain compacts in ``before_model``, a graph node of
  its own, so every step would pay a superstep and a checkpoint write (measured
  in ``bench/chain_overhead.py``). Here compaction persists in ``after_model``
  (folded into the model node by the fused chain) and ``wrap_model_call``
  compacts the request view when a request is still over the trigger (a run's
  first step after a large message, large tool results).
- **Summary input trimming** keeps the newest messages within the limit;
  LangChain's starts on a human message, which a region whose user request is
  pinned often lacks (it summarized nothing).
- **Trigger on the whole request**, not only state messages: the system prompt,
  tool schemas and DurableContext's block ride every request. The overhead is
  measured in ``wrap_model_call`` (the request as it reaches this layer) and
  added to the state's count, so compaction starts before the request, not the
  history, reaches the window.
- **Pinned messages** are never summarized: state system messages, the latest
  user request and DynamicContext reminders stay verbatim, in their order.
- **Skill-bundle rescue** (003): the most recent ``read_file`` bundles under
  ``/mnt/skills`` in the to-summarize region (the AI message and all its tool
  results, so no call is orphaned) stay verbatim within
  ``preserve_recent_skill_count`` / ``_tokens`` / ``_tokens_per_skill``.
- **Output shape** (003): ``RemoveMessage(REMOVE_ALL_MESSAGES)``, one
  ``HumanMessage(name="summary")`` stamped ``SystemOperationKind.SUMMARIZATION``
  provenance, then the pinned/rescued messages and the preserved tail. A
  previous summary is summarized again (no summaries pile up). When nothing is
  left to summarize (first-turn compaction), it is a no-op.
- **PII**: with ``pii_redaction`` on, summary input passes ``redact_text``.
- **A failing summary model** (after LangChain's retries) skips the
  compaction with a warning instead of failing the run: the history is intact,
  and an over-long request then meets the provider's own limit, which the
  reliability middlewares handle.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware import SummarizationMiddleware as LangChainSummarization
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from deerflow_extension_api.provenance import ContentKind, SystemOperationKind, provenance_kwargs
from middlewares._prefix_fold import PrefixFold
from middlewares._run_scope import current_run_key
from middlewares.durable_context import (
    SUMMARY_NAME,
    capture_durable_context,
    is_summary_message,
    is_user_turn,
)
from middlewares.pii_redaction import redact_text

__all__ = ["SummarizationMiddleware", "count_request_tokens"]

logger = logging.getLogger(__name__)

_REMINDER_KEY = "dynamic_context_reminder"


def count_request_tokens(messages: Sequence[BaseMessage], tools: Sequence[Any] = ()) -> int:
    """The approximate size of a request (messages and tool schemas), as this layer counts it."""
    return int(count_tokens_approximately(list(messages), tools=list(tools) or None))


# The request overhead last measured per thread (the graph is built per run, so an
# instance alone would start every run blind). Bounded; advisory only.
_OVERHEADS: OrderedDict[str, int] = OrderedDict()
_OVERHEADS_LOCK = threading.Lock()
_MAX_THREADS = 4096


def _overhead(thread_id: str) -> int:
    with _OVERHEADS_LOCK:
        return _OVERHEADS.get(thread_id, 0)


def _remember_overhead(thread_id: str, tokens: int) -> None:
    with _OVERHEADS_LOCK:
        _OVERHEADS[thread_id] = max(tokens, _OVERHEADS.pop(thread_id, 0))
        while len(_OVERHEADS) > _MAX_THREADS:
            _OVERHEADS.popitem(last=False)


def _count(messages: Iterable[Any]) -> int:
    return int(count_tokens_approximately(list(messages)))


def _pinned(message: BaseMessage) -> bool:
    if isinstance(message, SystemMessage):
        return True
    kwargs = message.additional_kwargs or {}
    return isinstance(message, HumanMessage) and _REMINDER_KEY in kwargs


class SummarizationMiddleware(LangChainSummarization):  # type: ignore[type-arg]
    """Compact old history into one summary message near the model's context window."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    def __init__(
        self,
        *,
        model: BaseChatModel,
        trigger_tokens: int,
        keep_tokens: int,
        summary_model: BaseChatModel | None = None,
        trim_tokens_to_summarize: int | None = 4000,
        skills_path_prefix: str = "/mnt/skills",
        preserve_recent_skill_count: int = 5,
        preserve_recent_skill_tokens: int = 25_000,
        preserve_recent_skill_tokens_per_skill: int = 5_000,
        redact_pii: bool = False,
    ) -> None:
        if trigger_tokens < 1 or keep_tokens < 1 or keep_tokens >= trigger_tokens:
            raise ValueError("summarization: need 1 <= keep_tokens < trigger_tokens")
        if (
            min(
                preserve_recent_skill_count,
                preserve_recent_skill_tokens,
                preserve_recent_skill_tokens_per_skill,
            )
            < 0
        ):
            raise ValueError("summarization: skill rescue bounds must be >= 0")
        super().__init__(
            model,
            trigger=("tokens", trigger_tokens),
            keep=("tokens", keep_tokens),
            token_counter=_count,
            trim_tokens_to_summarize=trim_tokens_to_summarize,
            summarizer=summary_model,
        )
        self.trigger_tokens = trigger_tokens
        self.keep_tokens = keep_tokens
        self.skills_path_prefix = skills_path_prefix.rstrip("/") + "/"
        self.preserve_recent_skill_count = preserve_recent_skill_count
        self.preserve_recent_skill_tokens = preserve_recent_skill_tokens
        self.preserve_recent_skill_tokens_per_skill = preserve_recent_skill_tokens_per_skill
        self.redact_pii = redact_pii
        self._measured: int | None = None
        self._token_cache: dict[str, tuple[tuple[int, int], int]] = {}
        self._sizes: PrefixFold[int] = PrefixFold(0, self._add_tokens)

    def _count_cached(self, messages: Sequence[BaseMessage]) -> int:
        """The state's size; the check runs twice a step, so it resumes from the last one."""
        return self._sizes(messages)

    def _add_tokens(self, total: int, message: BaseMessage) -> int:
        """One message's tokens added to ``total``, counted once per id and shape."""
        cache = self._token_cache
        if len(cache) > 20_000:
            cache.clear()
        content = message.content
        shape = (
            len(content) if isinstance(content, str) else -len(content),
            len(message.tool_calls) if isinstance(message, AIMessage) else 0,
        )
        key = message.id
        hit = cache.get(key) if key else None
        if hit is not None and hit[0] == shape:
            return total + hit[1]
        tokens = _count([message])
        if key:
            cache[key] = (shape, tokens)
        return total + tokens

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "trigger_tokens": self.trigger_tokens,
            "keep_tokens": self.keep_tokens,
            "trim_tokens_to_summarize": self.trim_tokens_to_summarize,
            "skills_path_prefix": self.skills_path_prefix,
            "preserve_recent_skill_count": self.preserve_recent_skill_count,
            "preserve_recent_skill_tokens": self.preserve_recent_skill_tokens,
            "preserve_recent_skill_tokens_per_skill": self.preserve_recent_skill_tokens_per_skill,
            "redact_pii": self.redact_pii,
        }

    # -- planning ----------------------------------------------------------------

    def _skill_bundles(self, region: Sequence[BaseMessage]) -> list[set[int]]:
        """Index sets (AI message + all its tool results) of skill reads, newest first."""
        bundles: list[set[int]] = []
        for index, message in enumerate(region):
            if not isinstance(message, AIMessage) or not message.tool_calls:
                continue
            paths = [
                (call.get("args") or {}).get("path")
                for call in message.tool_calls
                if call.get("name") == "read_file"
            ]
            if not any(isinstance(p, str) and p.startswith(self.skills_path_prefix) for p in paths):
                continue
            ids = {call.get("id") for call in message.tool_calls}
            members = {index}
            for later in range(index + 1, len(region)):
                candidate = region[later]
                if not isinstance(candidate, ToolMessage):
                    break
                if candidate.tool_call_id in ids:
                    members.add(later)
            answered = {m.tool_call_id for i in members if isinstance(m := region[i], ToolMessage)}
            if answered >= {i for i in ids if i}:
                bundles.append(members)
        bundles.reverse()
        return bundles

    def _rescued(self, region: Sequence[BaseMessage]) -> set[int]:
        kept: set[int] = set()
        used = 0
        count = 0
        for bundle in self._skill_bundles(region):
            if count >= self.preserve_recent_skill_count:
                break
            size = _count([region[i] for i in sorted(bundle)])
            if size > self.preserve_recent_skill_tokens_per_skill:
                continue
            if used + size > self.preserve_recent_skill_tokens:
                continue
            kept |= bundle
            used += size
            count += 1
        return kept

    def _plan(
        self, messages: list[AnyMessage]
    ) -> tuple[list[BaseMessage], list[BaseMessage]] | None:
        """(to summarize, to keep in order) or None when no compaction is due."""
        self._ensure_message_ids(messages)
        overhead = _overhead(current_run_key()[0])
        total = self._count_cached(messages) + overhead
        if not self._should_summarize(messages, total):
            return None
        cutoff = self._determine_cutoff_index(messages)
        if cutoff <= 0:
            return None
        region = messages[:cutoff]
        latest_user = max((i for i, m in enumerate(messages) if is_user_turn(m)), default=-1)
        keep = self._rescued(region)
        keep |= {i for i, m in enumerate(region) if _pinned(m) or i == latest_user}
        # A kept message never strands a partner: an AI message's results follow it,
        # and a kept tool result brings its AI message along.
        keep = self._close_pairs(region, keep)
        to_summarize: list[BaseMessage] = [m for i, m in enumerate(region) if i not in keep]
        if not any(not is_summary_message(m) for m in to_summarize):
            return None  # nothing new to compact (e.g. a first-turn or pinned-only region)
        kept = [m for i, m in enumerate(region) if i in keep and not is_summary_message(m)]
        return to_summarize, [*kept, *messages[cutoff:]]

    @staticmethod
    def _close_pairs(region: Sequence[BaseMessage], keep: set[int]) -> set[int]:
        owner: dict[str, int] = {}
        for index, message in enumerate(region):
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    if call.get("id"):
                        owner[str(call["id"])] = index
        result = set(keep)
        for index, message in enumerate(region):
            if isinstance(message, ToolMessage) and index in keep and message.tool_call_id in owner:
                result.add(owner[message.tool_call_id])
        for index, message in enumerate(region):
            if isinstance(message, ToolMessage) and owner.get(message.tool_call_id) in result:
                result.add(index)
        return result

    def _trim_messages_for_summary(self, messages: list[AnyMessage]) -> list[AnyMessage]:
        """The newest messages within ``trim_tokens_to_summarize``.

        LangChain's trim starts on a human message; with the latest user request
        pinned, the region is often AI/tool turns only and would trim to nothing
        ("too long to summarize"). The summary prompt is text, so no pairing is needed.
        """
        limit = self.trim_tokens_to_summarize
        if limit is None:
            return messages
        kept: list[AnyMessage] = []
        used = 0
        for message in reversed(messages):
            size = _count([message])
            if kept and used + size > limit:
                break
            kept.append(message)
            used += size
        kept.reverse()
        return kept

    def _input(self, messages: list[BaseMessage]) -> list[AnyMessage]:
        if not self.redact_pii:
            return messages  # type: ignore[return-value]
        redacted: list[AnyMessage] = []
        for message in messages:
            text = message.text if isinstance(message.content, list) else message.content
            redacted.append(message.model_copy(update={"content": redact_text(str(text))}))  # type: ignore[arg-type]
        return redacted

    @staticmethod
    def _summary_message(summary: str) -> HumanMessage:
        return HumanMessage(
            content=summary,
            name=SUMMARY_NAME,
            id=f"summary-{uuid.uuid4().hex}",
            **provenance_kwargs(
                ContentKind.SUMMARY,
                SystemOperationKind.SUMMARIZATION,
                additional_kwargs={"hide_from_ui": True},
            ),
        )

    @staticmethod
    def _result(
        state: Any, summary: str, to_summarize: list[BaseMessage], kept: list[BaseMessage]
    ) -> dict[str, Any]:
        message = SummarizationMiddleware._summary_message(summary)
        update: dict[str, Any] = {
            "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), message, *kept]
        }
        # DurableContext's capture over the very region being compacted (spec 20:
        # "before compaction"): delegations and skill references outlive it.
        captured = capture_durable_context(state, to_summarize)
        if captured:
            update.update(captured)
        return update

    # -- summary generation: a failing summary model skips compaction ----------------

    def _summarize(self, to_summarize: list[BaseMessage]) -> str | None:
        try:
            return self._create_summary(self._input(to_summarize))
        except Exception:
            logger.warning("summarization: the summary call failed; not compacting", exc_info=True)
            return None

    async def _asummarize(self, to_summarize: list[BaseMessage]) -> str | None:
        try:
            return await self._acreate_summary(self._input(to_summarize))
        except Exception:
            logger.warning("summarization: the summary call failed; not compacting", exc_info=True)
            return None

    # -- hooks ---------------------------------------------------------------------

    # LangChain's class compacts in ``before_model``; that hook is its own graph
    # node, so every step of every run would pay a superstep and a checkpoint
    # write for a check that rarely fires. Here compaction persists in
    # ``after_model`` (folded into the model node by the fused chain) and a
    # request that is still over the trigger at call time (a run's first step
    # after a large user message, or large tool results) is compacted in the
    # request view by ``wrap_model_call``.
    before_model = AgentMiddleware.before_model
    abefore_model = AgentMiddleware.abefore_model

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        plan = self._plan(list(state["messages"]))
        if plan is None:
            return None
        to_summarize, kept = plan
        summary = self._summarize(to_summarize)
        return None if summary is None else self._result(state, summary, to_summarize, kept)

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        plan = self._plan(list(state["messages"]))
        if plan is None:
            return None
        to_summarize, kept = plan
        summary = await self._asummarize(to_summarize)
        return None if summary is None else self._result(state, summary, to_summarize, kept)

    @staticmethod
    def _compacted_view(
        request: ModelRequest[Any], summary: str, to_summarize: list[BaseMessage]
    ) -> ModelRequest[Any]:
        """The request without the summarized messages, the summary in their place."""
        gone = {m.id for m in to_summarize if m.id}
        messages: list[AnyMessage] = []
        placed = False
        for message in request.messages:
            if message.id in gone:
                if not placed:
                    messages.append(SummarizationMiddleware._summary_message(summary))
                    placed = True
                continue
            if is_summary_message(message):
                continue  # the new summary covers the previous one
            messages.append(message)
        return request.override(messages=messages)

    def _measure(self, request: ModelRequest[Any]) -> None:
        """Remember how much the request adds to the state's messages (system, tools, blocks).

        Measured on a run's first model call and whenever the request gained
        messages the state does not hold (a projected block), not on every step.
        """
        extra = len(request.messages) - len(request.state.get("messages") or [])
        if self._measured is not None and extra <= self._measured:
            return
        self._measured = extra
        try:
            state_messages = request.state.get("messages") or []
            system = [request.system_message] if request.system_message is not None else []
            full = count_request_tokens([*system, *request.messages], request.tools)
            overhead = max(0, full - _count(state_messages))
        except Exception:  # measuring is advisory; a request we cannot count still runs
            return
        _remember_overhead(current_run_key()[0], overhead)

    def _state_messages(self, request: ModelRequest[Any]) -> list[AnyMessage]:
        state = request.state if isinstance(request.state, dict) else {}
        return list(state.get("messages") or [])

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        self._measure(request)
        plan = self._plan(self._state_messages(request))
        summary = self._summarize(plan[0]) if plan is not None else None
        if plan is not None and summary is not None:
            request = self._compacted_view(request, summary, plan[0])
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        self._measure(request)
        plan = self._plan(self._state_messages(request))
        summary = await self._asummarize(plan[0]) if plan is not None else None
        if plan is not None and summary is not None:
            request = self._compacted_view(request, summary, plan[0])
        return await handler(request)
