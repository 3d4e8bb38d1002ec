"""A deterministic chat model that plays a script: the offline demo and the test model.

Why stateless: the turn played is chosen by how many AI messages the request
already holds, so the same script gives the same run in any process, after a
server restart, and under ``langgraph dev``'s worker model.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["EXHAUSTED_TEXT", "ScriptTurn", "ScriptedChatModel", "ScriptedToolCall"]

EXHAUSTED_TEXT = "[scripted model] The script is exhausted; no more scripted turns."

_TOKEN = re.compile(r"\S+\s*|\s+")


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class ScriptTurn(BaseModel):
    """One scripted AI response: text, tool calls, both, or (deliberately) neither."""

    model_config = ConfigDict(extra="forbid")

    content: str = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    response_metadata: dict[str, Any] = Field(default_factory=dict)
    additional_kwargs: dict[str, Any] = Field(default_factory=dict)


def _load_script_file(path: str) -> list[Any]:
    text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, list):
        raise ValueError(f"script_path {path!r} must hold a list of turns")
    return data


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

    def turn_index(self, messages: Sequence[BaseMessage]) -> int:
        return sum(1 for m in messages if isinstance(m, AIMessage))

    def _message_for(self, messages: Sequence[BaseMessage]) -> AIMessage:
        index = self.turn_index(messages)
        prompt_tokens = sum(_estimate_tokens(m.text) for m in messages)
        if index >= len(self.script):
            content: str = self.exhausted_text
            tool_calls: list[dict[str, Any]] = []
            response_metadata: dict[str, Any] = {"finish_reason": "stop"}
            additional_kwargs: dict[str, Any] = {}
        else:
            turn = self.script[index]
            content = turn.content
            tool_calls = [
                {
                    "name": call.name,
                    "args": call.args,
                    "id": call.id or f"call_{index}_{position}",
                    "type": "tool_call",
                }
                for position, call in enumerate(turn.tool_calls)
            ]
            response_metadata = {
                "finish_reason": "tool_calls" if tool_calls else "stop",
                **turn.response_metadata,
            }
            additional_kwargs = dict(turn.additional_kwargs)
        completion_tokens = _estimate_tokens(content) + sum(
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
        return ChatResult(generations=[ChatGeneration(message=self._message_for(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)

    def _chunks(self, messages: Sequence[BaseMessage]) -> Iterator[AIMessageChunk]:
        message = self._message_for(messages)
        text = message.text
        pieces = _TOKEN.findall(text) if text else []
        for piece in pieces:
            yield AIMessageChunk(content=piece)
        yield AIMessageChunk(
            content="",
            tool_call_chunks=[
                {
                    "name": call["name"],
                    "args": json.dumps(call["args"]),
                    "id": call["id"],
                    "index": position,
                    "type": "tool_call_chunk",
                }
                for position, call in enumerate(message.tool_calls)
            ],
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
