"""A scripted chat model that records what it receives: the test double for "what did the model see".

Why it ships with the product (beside the scripted model): scenario tests drive
the assembled chain through a real server, where the model is built from
config in the server's process. The only way to assert on the requests the
chain produced is a model that keeps them. Each call appends one
:class:`ModelCall` (deep copies of the messages, the names and schemas of the
tools bound for that call) to a process-wide list named by ``recording_key``,
which the test reads back with :func:`recorded_calls`.

Use in config::

    models:
      - name: recorder
        use: runtime.recording_model:RecordingChatModel
        recording_key: my-test          # one list per key
        script: [...]                   # as for ScriptedChatModel
"""

from __future__ import annotations

import copy
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from runtime.scripted_model import ScriptedChatModel

__all__ = ["ModelCall", "RecordingChatModel", "clear_recordings", "recorded_calls"]


@dataclass(frozen=True)
class ModelCall:
    """One model request as the provider would have received it."""

    messages: list[BaseMessage]
    tools: list[str] = field(default_factory=list)
    tool_schemas: list[dict[str, Any]] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def system_messages(self) -> list[SystemMessage]:
        return [m for m in self.messages if isinstance(m, SystemMessage)]

    @property
    def text(self) -> str:
        """Every message's text, joined: for "does the request mention X" checks."""
        return "\n".join(m.text for m in self.messages)

    def unanswered_tool_calls(self) -> list[str]:
        """Ids of tool calls in the request with no ToolMessage answering them."""
        answered = {m.tool_call_id for m in self.messages if isinstance(m, ToolMessage)}
        return [
            call_id
            for m in self.messages
            if isinstance(m, AIMessage)
            for call in m.tool_calls
            if (call_id := call.get("id")) and call_id not in answered
        ]


_LOCK = threading.Lock()
_RECORDINGS: dict[str, list[ModelCall]] = {}


def recorded_calls(key: str) -> list[ModelCall]:
    """The calls recorded under ``key`` so far, oldest first (a copy of the list)."""
    with _LOCK:
        return list(_RECORDINGS.get(key, ()))


def clear_recordings(key: str | None = None) -> None:
    """Forget the calls under ``key`` (all keys when None)."""
    with _LOCK:
        if key is None:
            _RECORDINGS.clear()
        else:
            _RECORDINGS.pop(key, None)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
        name = tool.get("name")
        return name if isinstance(name, str) else "?"
    return str(getattr(tool, "__name__", None) or getattr(tool, "name", "?"))


def _schema(tool: Any) -> dict[str, Any]:
    try:
        return convert_to_openai_tool(tool)
    except Exception:  # a schema we cannot render is still recorded by name
        return {"name": _tool_name(tool)}


class RecordingChatModel(ScriptedChatModel):
    """``ScriptedChatModel`` that records each request under ``recording_key``."""

    recording_key: str = "default"
    model_name: str = "recorder"

    _bound_tools: list[Any] = PrivateAttr(default_factory=list)
    _bind_kwargs: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "recording"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Any | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """A copy that remembers the tools it was bound with (the script is shared)."""
        bound = self.model_copy()
        bound._failed_attempts = self._failed_attempts
        bound._attempts_lock = self._attempts_lock
        bound._calls = self._calls
        bound._nonce = self._nonce
        bound._bound_tools = list(tools)
        bound._bind_kwargs = {"tool_choice": tool_choice, **kwargs} if tool_choice else dict(kwargs)
        return bound

    def _record(self, messages: Sequence[BaseMessage]) -> None:
        call = ModelCall(
            messages=copy.deepcopy(list(messages)),
            tools=[_tool_name(t) for t in self._bound_tools],
            tool_schemas=[_schema(t) for t in self._bound_tools],
            kwargs=dict(self._bind_kwargs),
        )
        with _LOCK:
            _RECORDINGS.setdefault(self.recording_key, []).append(call)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._record(messages)
        return super()._generate(messages, stop, run_manager, **kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self._record(messages)
        yield from super()._stream(messages, stop, run_manager, **kwargs)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        self._record(messages)
        async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
            yield chunk
