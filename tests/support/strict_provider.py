"""A strict provider for tests: the request rules strict chat APIs enforce.

``check_strict_request`` lists every violation of the rules that strict
OpenAI-compatible and Anthropic-style backends apply to a chat request:

- at most one system message, and only as the first message;
- every tool call has a non-empty string id, a name matching
  ``[A-Za-z0-9_-]{1,64}`` and JSON-object arguments (in ``tool_calls``, and in a
  raw ``additional_kwargs["tool_calls"]`` payload an adapter would resend);
- no ``invalid_tool_calls`` (adapters resend them with their broken arguments);
- an AI message with tool calls is followed immediately by one tool message per
  call, answering them in the declared order;
- no tool message anywhere else (no orphan, no duplicate answer).

``StrictRecordingModel`` is a ``ScriptedChatModel`` that records each request
it receives and rejects a violating one with a provider-like HTTP 400, as a
strict provider would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from pydantic import PrivateAttr

from runtime.scripted_model import ScriptedChatModel, ScriptedError, make_provider_error

__all__ = ["StrictRecordingModel", "check_strict_request"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _ai_call_problems(index: int, message: AIMessage) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    ids: list[str] = []
    if message.invalid_tool_calls:
        problems.append(f"[{index}] AI message carries invalid_tool_calls")
    for call in message.tool_calls:
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            problems.append(f"[{index}] tool call without an id: {call!r}")
            continue
        ids.append(call_id)
        if not isinstance(call.get("name"), str) or not _NAME.match(call["name"]):
            problems.append(
                f"[{index}] tool call {call_id} has an invalid name {call.get('name')!r}"
            )
        if not isinstance(call.get("args"), dict):
            problems.append(f"[{index}] tool call {call_id} arguments are not an object")
        else:
            try:
                json.dumps(call["args"])
            except (TypeError, ValueError):
                problems.append(f"[{index}] tool call {call_id} arguments are not JSON")
    raw = (message.additional_kwargs or {}).get("tool_calls")
    if raw is not None:
        if not isinstance(raw, list):
            problems.append(f"[{index}] raw tool_calls payload is not a list")
        else:
            raw_ids = []
            for entry in raw:
                function = entry.get("function") if isinstance(entry, dict) else None
                if not isinstance(function, dict):
                    problems.append(f"[{index}] raw tool call without a function: {entry!r}")
                    continue
                raw_ids.append(entry.get("id"))
                if not isinstance(function.get("name"), str) or not _NAME.match(function["name"]):
                    problems.append(
                        f"[{index}] raw tool call has an invalid name {function.get('name')!r}"
                    )
                try:
                    parsed = json.loads(function.get("arguments") or "")
                except (TypeError, ValueError):
                    parsed = None
                if not isinstance(parsed, dict):
                    problems.append(f"[{index}] raw tool call arguments are not a JSON object")
            if not message.tool_calls:
                ids = [i for i in raw_ids if isinstance(i, str)]
            elif raw_ids != ids:
                problems.append(
                    f"[{index}] raw tool_calls ids {raw_ids} disagree with tool_calls {ids}"
                )
    if len(set(ids)) != len(ids):
        problems.append(f"[{index}] duplicate tool call ids {ids}")
    return problems, ids


def check_strict_request(messages: Sequence[BaseMessage]) -> list[str]:
    """Every rule violation in ``messages`` (empty means a strict provider accepts it)."""
    problems: list[str] = []
    for index, message in enumerate(messages):
        if isinstance(message, SystemMessage) and index != 0:
            problems.append(f"[{index}] system message that is not the first message")
    index = 0
    while index < len(messages):
        message = messages[index]
        if isinstance(message, ToolMessage):
            problems.append(
                f"[{index}] tool message {message.tool_call_id!r} answers no preceding call"
            )
            index += 1
            continue
        if not isinstance(message, AIMessage):
            index += 1
            continue
        call_problems, ids = _ai_call_problems(index, message)
        problems.extend(call_problems)
        index += 1
        for expected in ids:
            if index >= len(messages) or not isinstance(messages[index], ToolMessage):
                problems.append(
                    f"[{index}] tool call {expected} is not answered right after its AI message"
                )
                break
            answer = messages[index]
            assert isinstance(answer, ToolMessage)
            if answer.tool_call_id != expected:
                problems.append(
                    f"[{index}] expected the result of {expected}, found {answer.tool_call_id!r}"
                )
            index += 1
    return problems


class StrictRecordingModel(ScriptedChatModel):
    """Records every request; rejects a violating one like a strict provider (HTTP 400)."""

    strict: bool = True
    _requests: list[list[BaseMessage]] = PrivateAttr(default_factory=list)

    @classmethod
    def play(cls, script: Sequence[Mapping[str, Any]], **fields: Any) -> StrictRecordingModel:
        """A model for ``script`` given as plain dicts (validated like a config's)."""
        return cls.model_validate({"script": [dict(turn) for turn in script], **fields})

    @property
    def requests(self) -> list[list[BaseMessage]]:
        return self._requests

    def _check(self, messages: Sequence[BaseMessage]) -> None:
        self._requests.append(list(messages))
        if not self.strict:
            return
        problems = check_strict_request(messages)
        if problems:
            raise make_provider_error(
                ScriptedError(status=400, message="invalid request: " + "; ".join(problems))
            )

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self._check(messages)
        return super()._generate(messages, *args, **kwargs)

    def _stream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self._check(messages)
        yield from super()._stream(messages, *args, **kwargs)

    async def _astream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self._check(messages)
        async for chunk in super()._astream(messages, *args, **kwargs):
            yield chunk
