"""A deterministic chat model that plays a script: the offline demo and the test model.

Why stateless: the turn played is chosen by how many AI messages the request
already holds, so the same script gives the same run in any process, after a
server restart, and under ``langgraph dev``'s worker model.

Two options serve long conversations, where summarization removes AI messages
and the count stops meaning "turn": ``turn_by: calls`` picks the turn by a
counter of answered calls on the instance (shared by its ``bind_tools``
copies; the server builds a model per run, so it counts within a run), and
``cycle_from: N`` replays turns N.. of the script once it is exhausted, so a
short script drives hundreds of steps. Tool call ids then carry a per-instance
nonce so they never repeat in a thread.

A turn may also fail like a real provider (``error`` / ``errors``: HTTP statuses
with or without ``Retry-After``, timeouts, connection errors, status-less
in-stream errors) or answer in an odd shape (content blocks, invalid tool calls,
any ``finish_reason``), so the reliability middlewares are tested against the
shapes real providers produce. The only state is a per-instance count of failed
attempts per turn, so ``errors`` are consumed by retries; the server builds a
fresh model per run, so a run replays the same failures.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import ToolCallChunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

__all__ = [
    "EXHAUSTED_TEXT",
    "ScriptTurn",
    "ScriptedChatModel",
    "ScriptedConnectionError",
    "ScriptedError",
    "ScriptedProviderError",
    "ScriptedStreamError",
    "ScriptedTimeoutError",
    "ScriptedToolCall",
    "make_provider_error",
]

EXHAUSTED_TEXT = "[scripted model] The script is exhausted; no more scripted turns."

_TOKEN = re.compile(r"\S+\s*|\s+")


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class ScriptedError(BaseModel):
    """A provider failure to raise instead of answering.

    ``kind``: ``status`` (an HTTP error with ``status``), ``timeout``,
    ``connection``, or ``stream`` (a status-less error raised mid-stream after
    ``after_chunks`` text chunks; its ``code``/``status``/``type`` attributes
    and message text are all a classifier gets). ``sdk`` picks the exception
    classes: ``generic`` (this module's), ``openai`` or ``anthropic`` (the real
    SDK classes, built with a real ``httpx.Response``).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["status", "timeout", "connection", "stream"] = "status"
    status: int | None = Field(default=None, ge=100, le=599)
    message: str = ""
    retry_after: str | int | float | None = Field(
        default=None, description="Retry-After header value: seconds or an HTTP date"
    )
    headers: dict[str, str] = Field(default_factory=dict)
    code: Any = None
    type: str | None = None
    body: dict[str, Any] | None = None
    sdk: Literal["generic", "openai", "anthropic"] = "generic"
    after_chunks: int = Field(default=0, ge=0)


class ScriptTurn(BaseModel):
    """One scripted AI response: text, tool calls, both, or (deliberately) neither.

    ``content`` may be a list of content blocks (any JSON, including blocks whose
    ``type`` is a list or an object). ``errors`` are raised on successive attempts
    of this turn before it answers; ``error`` is raised on every attempt.
    """

    model_config = ConfigDict(extra="forbid")

    content: str | list[Any] = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    invalid_tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    response_metadata: dict[str, Any] = Field(default_factory=dict)
    additional_kwargs: dict[str, Any] = Field(default_factory=dict)
    errors: list[ScriptedError] = Field(default_factory=list)
    error: ScriptedError | None = None


class ScriptedProviderError(Exception):
    """A generic provider HTTP error: ``status_code``, ``response``, ``body``."""

    def __init__(self, message: str, *, status_code: int, response: Any, body: Any) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.response = response
        self.body = body


class ScriptedTimeoutError(TimeoutError):
    """A generic request timeout."""


class ScriptedConnectionError(ConnectionError):
    """A generic connection failure."""


class ScriptedStreamError(Exception):
    """A status-less error reported inside a stream (only what the stream said)."""

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        self.message = message
        for key, value in attrs.items():
            setattr(self, key, value)


_OPENAI_STATUS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}
_ANTHROPIC_STATUS = {**_OPENAI_STATUS, 529: "OverloadedError"}


def make_provider_error(spec: ScriptedError) -> Exception:
    """The exception a real provider client would raise for ``spec``."""
    import httpx

    request = httpx.Request("POST", "https://provider.invalid/v1/messages")
    message = spec.message or _default_message(spec)
    if spec.kind == "timeout":
        if spec.sdk == "generic":
            return ScriptedTimeoutError(message)
        return _sdk(spec.sdk).APITimeoutError(request=request)  # type: ignore[no-any-return]
    if spec.kind == "connection":
        if spec.sdk == "generic":
            return ScriptedConnectionError(message)
        return _sdk(spec.sdk).APIConnectionError(message=message, request=request)  # type: ignore[no-any-return]
    if spec.kind == "stream":
        attrs = {
            key: value
            for key, value in (("code", spec.code), ("status", spec.status), ("type", spec.type))
            if value is not None
        }
        if spec.sdk == "generic":
            return ScriptedStreamError(message, **attrs)
        body = dict(spec.body or {}) or {"message": message, **attrs}
        return _sdk(spec.sdk).APIError(message, request, body=body)  # type: ignore[no-any-return]
    status = spec.status or 500
    headers = dict(spec.headers)
    if spec.retry_after is not None:
        headers["retry-after"] = str(spec.retry_after)
    response = httpx.Response(status, headers=headers, request=request, json=spec.body or {})
    if spec.sdk == "generic":
        return ScriptedProviderError(message, status_code=status, response=response, body=spec.body)
    module = _sdk(spec.sdk)
    table = _ANTHROPIC_STATUS if spec.sdk == "anthropic" else _OPENAI_STATUS
    name = table.get(status) or ("InternalServerError" if status >= 500 else "APIStatusError")
    cls = getattr(module, name)
    return cls(message, response=response, body=spec.body)  # type: ignore[no-any-return]


def _sdk(name: str) -> Any:
    if name == "openai":
        import openai

        return openai
    import anthropic

    return anthropic


def _default_message(spec: ScriptedError) -> str:
    if spec.kind == "timeout":
        return "Request timed out."
    if spec.kind == "connection":
        return "Connection error."
    if spec.kind == "stream":
        return "The stream ended with an error."
    return f"Error code: {spec.status or 500}"


def _load_script_file(path: str) -> list[Any]:
    text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, list):
        raise ValueError(f"script_path {path!r} must hold a list of turns")
    return data


def _with_cycle(value: Any, cycle: int) -> Any:
    if isinstance(value, str):
        return value.replace("{cycle}", str(cycle))
    if isinstance(value, list):
        return [_with_cycle(item, cycle) for item in value]
    if isinstance(value, dict):
        return {key: _with_cycle(item, cycle) for key, item in value.items()}
    return value


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


class ScriptedChatModel(BaseChatModel):
    """A real ``BaseChatModel`` that answers from ``script``.

    Configure with ``script`` (a list of turns) or ``script_path`` (a JSON/YAML
    file holding that list, read once at construction).
    """

    script: list[ScriptTurn] = Field(default_factory=list)
    script_path: str | None = None
    exhausted_text: str = EXHAUSTED_TEXT
    model_name: str = "scripted"
    turn_by: Literal["ai_messages", "calls"] = "ai_messages"
    cycle_from: int | None = Field(default=None, ge=0)
    tour: bool = Field(
        default=False,
        description="Play the script as chapters, one per user message, cycling: a "
        "chapter ends with a turn without tool calls, and '{cycle}' in a tool call's "
        "string arguments becomes the round number. Never exhausted.",
    )

    _failed_attempts: dict[int, int] = PrivateAttr(default_factory=dict)
    _attempts_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _calls: list[int] = PrivateAttr(default_factory=lambda: [0])
    _nonce: str = PrivateAttr(default_factory=lambda: uuid.uuid4().hex[:8])

    @model_validator(mode="after")
    def _cycle_in_script(self) -> ScriptedChatModel:
        if self.cycle_from is not None and self.cycle_from >= len(self.script):
            raise ValueError("cycle_from must index a turn of the script")
        return self

    @model_validator(mode="before")
    @classmethod
    def _read_script_path(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("script_path") and not data.get("script"):
            data = dict(data)
            data["script"] = _load_script_file(str(data["script_path"]))
        return data

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "turns": len(self.script)}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Any | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Tools do not change a scripted answer, so binding returns the model."""
        return self

    def raw_turn(self, messages: Sequence[BaseMessage]) -> int:
        """The turn count before cycling: AI messages in the request, or answered calls."""
        if self.turn_by == "calls":
            with self._attempts_lock:
                return self._calls[0]
        return sum(1 for m in messages if isinstance(m, AIMessage))

    def turn_index(self, messages: Sequence[BaseMessage]) -> int:
        index = self.raw_turn(messages)
        start = self.cycle_from
        if start is not None and index >= len(self.script):
            index = start + (index - start) % (len(self.script) - start)
        return index

    def _answered(self) -> None:
        if self.turn_by == "calls":
            with self._attempts_lock:
                self._calls[0] += 1

    def _call_id(self, messages: Sequence[BaseMessage], position: int) -> str:
        raw = self.raw_turn(messages)
        if self.turn_by == "calls" or self.cycle_from is not None:
            return f"call_{self._nonce}_{raw}_{position}"
        return f"call_{raw}_{position}"

    def _chapters(self) -> list[list[ScriptTurn]]:
        chapters: list[list[ScriptTurn]] = [[]]
        for turn in self.script:
            chapters[-1].append(turn)
            if not turn.tool_calls and not turn.invalid_tool_calls:
                chapters.append([])
        return [chapter for chapter in chapters if chapter]

    def _turn_for(self, messages: Sequence[BaseMessage]) -> tuple[int, ScriptTurn | None, int]:
        """(index, turn, round): the turn to play; ``None`` past the end of a script.

        ``index`` counts the AI messages so far (it keys tool call ids and failed
        attempts). In ``tour`` mode the chapter is the number of finished answers
        (AI messages without tool calls), modulo the number of chapters, and the
        step is the number of AI messages since the last finished answer.
        """
        index = self.turn_index(messages)
        if not self.tour:
            turn = self.script[index] if index < len(self.script) else None
            return index, turn, 1
        chapters = self._chapters()
        if not chapters:
            return index, None, 1
        answered, step = 0, 0
        for message in messages:
            if isinstance(message, AIMessage):
                if message.tool_calls or message.invalid_tool_calls:
                    step += 1
                else:
                    answered, step = answered + 1, 0
        chapter = chapters[answered % len(chapters)]
        return index, chapter[min(step, len(chapter) - 1)], answered // len(chapters) + 1

    def _pending_error(self, messages: Sequence[BaseMessage]) -> ScriptedError | None:
        """The failure this attempt must raise, if any (consumes one of ``errors``)."""
        index, turn, _ = self._turn_for(messages)
        if turn is None:
            return None
        if turn.error is not None:
            return turn.error
        with self._attempts_lock:
            failed = self._failed_attempts.get(index, 0)
            if failed < len(turn.errors):
                self._failed_attempts[index] = failed + 1
                return turn.errors[failed]
        return None

    def _message_for(self, messages: Sequence[BaseMessage]) -> AIMessage:
        _, turn, cycle = self._turn_for(messages)
        prompt_tokens = sum(_estimate_tokens(m.text) for m in messages)
        invalid_tool_calls: list[dict[str, Any]] = []
        if turn is None:
            content: str | list[Any] = self.exhausted_text
            tool_calls: list[dict[str, Any]] = []
            response_metadata: dict[str, Any] = {"finish_reason": "stop"}
            additional_kwargs: dict[str, Any] = {}
        else:
            content = turn.content
            tool_calls = [
                {
                    "name": call.name,
                    "args": _with_cycle(call.args, cycle) if self.tour else call.args,
                    "id": call.id or self._call_id(messages, position),
                    "type": "tool_call",
                }
                for position, call in enumerate(turn.tool_calls)
            ]
            invalid_tool_calls = [
                {"type": "invalid_tool_call", "name": None, "args": None, "id": None, "error": None}
                | dict(call)
                for call in turn.invalid_tool_calls
            ]
            response_metadata = {
                "finish_reason": "tool_calls" if tool_calls or invalid_tool_calls else "stop",
                **turn.response_metadata,
            }
            additional_kwargs = dict(turn.additional_kwargs)
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        completion_tokens = _estimate_tokens(text) + sum(
            _estimate_tokens(json.dumps(c["args"])) for c in tool_calls
        )
        usage: UsageMetadata = {
            "input_tokens": prompt_tokens,
            "output_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        return AIMessage(
            content=content,
            tool_calls=tool_calls,
            invalid_tool_calls=invalid_tool_calls,  # type: ignore[arg-type]
            response_metadata={"model_name": self.model_name, **response_metadata},
            additional_kwargs=additional_kwargs,
            usage_metadata=usage,
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        error = self._pending_error(messages)
        if error is not None:
            raise make_provider_error(error)
        message = self._message_for(messages)
        self._answered()
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)

    def _chunks(self, messages: Sequence[BaseMessage]) -> Iterator[AIMessageChunk]:
        error = self._pending_error(messages)
        message = self._message_for(messages)
        if error is None:
            self._answered()
        if isinstance(message.content, str):
            text = message.text
            pieces: list[Any] = _TOKEN.findall(text) if text else []
        else:
            pieces = [[block] for block in message.content]
        for position, piece in enumerate(pieces):
            if error is not None and position >= error.after_chunks:
                break
            yield AIMessageChunk(content=piece)
        if error is not None:
            raise make_provider_error(error)
        chunks: list[ToolCallChunk] = [
            ToolCallChunk(
                name=call["name"],
                args=json.dumps(call["args"]),
                id=call["id"],
                index=position,
                type="tool_call_chunk",
            )
            for position, call in enumerate(message.tool_calls)
        ]
        first_invalid = len(chunks)
        chunks.extend(
            ToolCallChunk(
                name=call.get("name"),
                args=call.get("args"),
                id=call.get("id"),
                index=first_invalid + position,
                type="tool_call_chunk",
            )
            for position, call in enumerate(message.invalid_tool_calls)
        )
        yield AIMessageChunk(
            content="" if isinstance(message.content, str) else [],
            tool_call_chunks=chunks,
            response_metadata=message.response_metadata,
            additional_kwargs=message.additional_kwargs,
            usage_metadata=message.usage_metadata,
            chunk_position="last",
        )

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            generation = ChatGenerationChunk(message=chunk)
            if run_manager and isinstance(chunk.content, str) and chunk.content:
                run_manager.on_llm_new_token(chunk.content, chunk=generation)
            yield generation

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            generation = ChatGenerationChunk(message=chunk)
            if run_manager and isinstance(chunk.content, str) and chunk.content:
                await run_manager.on_llm_new_token(chunk.content, chunk=generation)
            yield generation
