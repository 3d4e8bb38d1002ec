"""ClarificationMiddleware (spec 000, number 40): ``ask_clarification`` pauses the run.

Registered last, so it is the innermost tool wrapper: the call never executes.
The question becomes a versioned ``human_input`` payload (v1
``free_text``/``choice_with_other``; v2 ``form`` from ``fields``). Two modes:

- ``interrupt`` (default; LangGraph Server users expect human-in-the-loop to be
  an interrupt): ``wrap_tool_call`` calls ``interrupt()`` with a one-element
  list in Agent Chat UI's human-interrupt shape (``action_request``,
  ``config`` with ``allow_respond``, ``description``) that also carries the
  spec's payload under ``human_input``. The thread is ``interrupted``; Studio
  or the SDK resumes the same run with ``Command(resume=<answer>)``, a plain
  string or the UI's response shape (``{"type": "response", "args": ...}``,
  alone or in a list). The answer becomes the tool result, recorded as
  ``human_input_response``, and the model continues. A new user message sent
  instead of a resume is accepted as the answer: ``before_agent`` answers the
  stranded call with the question's fallback so history stays valid.
- ``end``: the spec's form. The call is answered with the readable fallback
  and ``artifact.human_input``, and the run ends with ``Command(goto=END)``;
  the next user message is the answer.

The interrupt lives in the tool wrapper (the tool node), never in a lifecycle
hook, so the fused chain's rule that fused hooks never interrupt holds.
``after_model`` drops same-turn sibling calls so nothing runs before the user
answers; a malformed ``ask_clarification`` parked on ``invalid_tool_calls`` is
the same stop signal. Runs with ``disable_clarification`` keep their siblings.

Form normalization is deterministic and atomic: one structurally broken field
(non-dict, bad or duplicate name, a JavaScript ``Object.prototype`` member
name, or over a cap) degrades the whole form to the legacy modes; benign issues
(unknown or unhashable types, option-less selects) degrade locally to ``text``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.config import get_config
from langgraph.graph import END
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from middlewares.tool_call_args import clone_ai_message_with_tool_calls
from runtime.run_options import merged_run_config

__all__ = [
    "CLARIFICATION_TOOL",
    "MAX_FIELDS",
    "MAX_FORM_SERIALIZED_BYTES",
    "MAX_OPTIONS",
    "MAX_TEXT_CHARS",
    "ClarificationMiddleware",
    "build_clarification_interrupt",
    "build_clarification_payload",
    "parse_clarification_answer",
    "render_clarification_text",
]

CLARIFICATION_TOOL = "ask_clarification"
HUMAN_INPUT_MARKER = "deerflow_human_input"
HUMAN_INPUT_RESPONSE_KEY = "human_input_response"
MODES = ("interrupt", "end")
NO_ANSWER_TEXT = (
    "The user did not answer the question. Continue with your best judgment and state "
    "the assumptions you made."
)
DISABLED_TEXT = (
    "Clarification is disabled for this run: nobody can answer now. Continue with your "
    "best judgment and state the assumptions you made."
)
MAX_FIELDS = 16
MAX_OPTIONS = 24
MAX_TEXT_CHARS = 200
MAX_FORM_SERIALIZED_BYTES = 16 * 1024
FIELD_TYPES = ("text", "textarea", "select", "multiselect", "checkbox", "number")
_SELECTS = ("select", "multiselect")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
# Names a JavaScript client would read off Object.prototype instead of the form.
_RESERVED_NAMES = frozenset(
    {
        "__proto__",
        "constructor",
        "prototype",
        "hasOwnProperty",
        "isPrototypeOf",
        "propertyIsEnumerable",
        "toLocaleString",
        "toString",
        "valueOf",
        "__defineGetter__",
        "__defineSetter__",
        "__lookupGetter__",
        "__lookupSetter__",
    }
)


class _BrokenForm(ValueError):
    """A structural problem: the whole form degrades to the legacy modes."""


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _leaves(value: Any) -> Iterator[Any]:
    """Scalar leaves of XML-to-dict containers, in source order."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    elif value is not None:
        yield value


def normalize_options(raw: Any) -> list[str]:
    """Flatten, strip residual XML tags, trim, drop blanks, dedupe (first wins)."""
    seen: set[str] = set()
    result: list[str] = []
    for leaf in _leaves(raw):
        text = _TAG.sub("", _text(leaf)).strip()
        if text and text not in seen:
            seen.add(text)
            result.append(text)
    return result


def _check_text(value: str, what: str) -> str:
    if len(value) > MAX_TEXT_CHARS:
        raise _BrokenForm(f"{what} exceeds {MAX_TEXT_CHARS} characters")
    return value


def _field_type(raw: Any) -> str:
    # Equality probes only: ``type: []`` / ``type: {}`` are legal JSON and unhashable.
    for known in FIELD_TYPES:
        if isinstance(raw, str) and raw == known:
            return known
    return "text"


def _normalize_field(raw: Any, names: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _BrokenForm("a field is not an object")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or name in _RESERVED_NAMES:
        raise _BrokenForm(f"invalid field name {name!r}")
    if name in names:
        raise _BrokenForm(f"duplicate field name {name!r}")
    names.add(name)
    label = _check_text(_text(raw.get("label")).strip() or name, f"field {name} label")
    kind = _field_type(raw.get("type"))
    field: dict[str, Any] = {"name": name, "label": label, "type": kind}
    if kind in _SELECTS:
        raw_options = raw.get("options")
        if isinstance(raw_options, list) and len(raw_options) > MAX_OPTIONS:
            raise _BrokenForm(f"field {name} has more than {MAX_OPTIONS} options")
        options = normalize_options(raw_options)
        if len(options) > MAX_OPTIONS:
            raise _BrokenForm(f"field {name} has more than {MAX_OPTIONS} options")
        for option in options:
            _check_text(option, f"field {name} option")
        if options:
            field["options"] = options
        else:
            field["type"] = kind = "text"
    required = raw.get("required") is True
    field["required"] = required
    if kind == "checkbox":
        field["default"] = raw.get("default") is True
        if required:
            field["consent"] = True
    elif raw.get("placeholder") is not None:
        field["placeholder"] = _check_text(
            _text(raw.get("placeholder")), f"field {name} placeholder"
        )
    return field


def _form(fields: Any) -> list[dict[str, Any]]:
    if not isinstance(fields, list) or not fields:
        raise _BrokenForm("fields is not a non-empty list")
    if len(fields) > MAX_FIELDS:
        raise _BrokenForm(f"more than {MAX_FIELDS} fields")
    names: set[str] = set()
    return [_normalize_field(raw, names) for raw in fields]


def build_clarification_payload(args: Any) -> dict[str, Any]:
    """The versioned ``human_input`` payload for an ``ask_clarification`` call."""
    values = args if isinstance(args, dict) else {}
    question = _text(values.get("question")).strip() or "Could you clarify what you need?"
    base: dict[str, Any] = {
        "source": CLARIFICATION_TOOL,
        "question": question,
        "clarification_type": _text(values.get("clarification_type")) or "missing_info",
    }
    context = _text(values.get("context")).strip()
    if context:
        base["context"] = context
    if values.get("fields") is not None:
        try:
            form = {**base, "version": 2, "mode": "form", "fields": _form(values["fields"])}
            size = len(json.dumps(form, ensure_ascii=False).encode("utf-8"))
            if size > MAX_FORM_SERIALIZED_BYTES:
                raise _BrokenForm(f"form is {size} bytes, over {MAX_FORM_SERIALIZED_BYTES}")
            return form
        except _BrokenForm as problem:
            base["degraded_from_form"] = str(problem)
    options = normalize_options(values.get("options"))[:MAX_OPTIONS]
    if options:
        return {**base, "version": 1, "mode": "choice_with_other", "options": options}
    return {**base, "version": 1, "mode": "free_text"}


def render_clarification_text(payload: dict[str, Any]) -> str:
    """The readable fallback every client can show."""
    lines = [payload["question"]]
    if payload.get("context"):
        lines.append(f"\nContext: {payload['context']}")
    if payload.get("mode") == "choice_with_other":
        lines.append("")
        lines.extend(f"{i}. {option}" for i, option in enumerate(payload["options"], start=1))
        lines.append("(Or answer in your own words.)")
    elif payload.get("mode") == "form":
        lines.append("\nPlease answer:")
        for field in payload["fields"]:
            hint = ""
            if field.get("options"):
                hint = f" (one of: {', '.join(field['options'])})"
            elif field["type"] == "checkbox":
                hint = " (yes/no, default no)"
            required = " [required]" if field.get("required") else ""
            lines.append(f"- {field['label']}{hint}{required}")
    return "\n".join(lines)


def _clarification_disabled() -> bool:
    try:
        config = get_config()
    except RuntimeError:
        return False
    return merged_run_config(config).get("disable_clarification") is True


def _parse_invalid_args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {"question": raw[: MAX_TEXT_CHARS * 5]}
        if isinstance(parsed, dict):
            return parsed
    return {}


def build_clarification_interrupt(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The interrupt value: Agent Chat UI's human-interrupt list carrying the spec payload."""
    args: dict[str, Any] = {"question": payload["question"]}
    for key in ("options", "fields", "context"):
        if key in payload:
            args[key] = payload[key]
    return [
        {
            "action_request": {"action": CLARIFICATION_TOOL, "args": args},
            "config": {
                "allow_respond": True,
                "allow_accept": False,
                "allow_edit": False,
                "allow_ignore": False,
            },
            "description": render_clarification_text(payload),
            "human_input": payload,
        }
    ]


def _answer_text(value: Any) -> str | None:
    """The answer in a resume value, or None when there is none (ignore, empty, junk)."""
    if isinstance(value, list):
        return _answer_text(value[0]) if len(value) == 1 else None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, dict):
        kind = value.get("type")
        if isinstance(kind, str) and kind == "response":
            return _answer_text(value.get("args"))
        for key in ("answer", "text", "response"):
            if isinstance(value.get(key), str):
                return _answer_text(value[key])
        if not isinstance(kind, str):
            try:
                return json.dumps(value, ensure_ascii=False, sort_keys=True)[:4000] or None
            except (TypeError, ValueError):
                return None
    return None


def parse_clarification_answer(value: Any, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The ``human_input_response`` for a resume value (v1 ``text``/``option``), or None."""
    text = _answer_text(value)
    if text is None:
        return None
    option = next((o for o in payload.get("options") or () if o == text), None)
    return {
        "source": CLARIFICATION_TOOL,
        "version": 1,
        "response_kind": "option" if option is not None else "text",
        "text": text,
    }


def _stranded_question(messages: list[AnyMessage]) -> tuple[int, dict[str, Any]] | None:
    """An ``ask_clarification`` call left unanswered before newer user messages."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("name") == CLARIFICATION_TOOL and call.get("id") not in answered:
                    later = messages[index + 1 :]
                    if any(isinstance(m, HumanMessage) for m in later):
                        return index, dict(call)
            return None
    return None


class ClarificationMiddleware(AgentMiddleware[Any, Any]):
    """Turn ``ask_clarification`` into a run-level pause (always registered last).

    Args:
        mode: ``"interrupt"`` (a LangGraph interrupt, resumed with
            ``Command(resume=...)``) or ``"end"`` (``Command(goto=END)``).

    Example::

        create_agent(model, [ask_clarification], middleware=[ClarificationMiddleware()])
    """

    def __init__(self, *, mode: str = "interrupt") -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"clarification.mode must be one of {MODES}, got {mode!r}")
        self.mode = mode

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"mode": self.mode}

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def _answer(self, call_id: str, args: Any) -> ToolMessage:
        payload = build_clarification_payload(args)
        return ToolMessage(
            content=render_clarification_text(payload),
            artifact={"human_input": payload},
            tool_call_id=call_id,
            name=CLARIFICATION_TOOL,
            additional_kwargs={HUMAN_INPUT_MARKER: True},
        )

    def _ask(self, call_id: str, args: Any) -> ToolMessage:
        """Interrupt mode: pause for the answer, then return it as the tool result."""
        payload = build_clarification_payload(args)
        resumed = interrupt(build_clarification_interrupt(payload))
        response = parse_clarification_answer(resumed, payload)
        kwargs: dict[str, Any] = {HUMAN_INPUT_MARKER: True}
        artifact: dict[str, Any] = {"human_input": payload}
        if response is None:
            content = NO_ANSWER_TEXT
        else:
            content = response["text"]
            kwargs[HUMAN_INPUT_RESPONSE_KEY] = response
            artifact[HUMAN_INPUT_RESPONSE_KEY] = response
        return ToolMessage(
            content=content,
            artifact=artifact,
            tool_call_id=call_id,
            name=CLARIFICATION_TOOL,
            additional_kwargs=kwargs,
        )

    def _intercept(self, request: ToolCallRequest) -> ToolMessage | Command[Any] | None:
        call = request.tool_call
        if call.get("name") != CLARIFICATION_TOOL:
            return None
        call_id = str(call.get("id") or "")
        if _clarification_disabled():
            return ToolMessage(
                content=DISABLED_TEXT,
                tool_call_id=call_id,
                name=CLARIFICATION_TOOL,
                status="error",
            )
        if self.mode == "interrupt":
            return self._ask(call_id, call.get("args"))
        message = self._answer(call_id, call.get("args"))
        return Command(update={"messages": [message]}, goto=END)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self._intercept(request) or handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        return self._intercept(request) or await handler(request)

    # -- before_agent: a new message instead of a resume is the answer -------------

    def _accept_new_message(self, state: Any) -> dict[str, Any] | None:
        messages = state.get("messages") if isinstance(state, dict) else None
        if not messages:
            return None
        stranded = _stranded_question(list(messages))
        if stranded is None:
            return None
        index, call = stranded
        answer = self._answer(str(call.get("id") or ""), call.get("args"))
        rebuilt = [*messages[: index + 1], answer, *messages[index + 1 :]]
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *rebuilt]}

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._accept_new_message(state)

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._accept_new_message(state)

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._isolate(state)

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._isolate(state)

    def _isolate(self, state: Any) -> dict[str, Any] | None:
        messages = state.get("messages") if isinstance(state, dict) else None
        if not messages or not isinstance(messages[-1], AIMessage):
            return None
        message: AIMessage = messages[-1]
        asks = [c for c in message.tool_calls if c.get("name") == CLARIFICATION_TOOL]
        invalid = [
            c for c in message.invalid_tool_calls or [] if c.get("name") == CLARIFICATION_TOOL
        ]
        if not asks and not invalid:
            return None
        if _clarification_disabled():
            return None
        if asks:
            if len(message.tool_calls) == 1 and not message.invalid_tool_calls:
                return None
            # Keep only the first question; siblings must not run before the answer.
            return {"messages": [clone_ai_message_with_tool_calls(message, asks[:1])]}
        # A malformed question parked on invalid_tool_calls: the same stop signal.
        parked = invalid[0]
        call_id = str(parked.get("id") or "clarification")
        cleared = clone_ai_message_with_tool_calls(message, [])
        repaired = cleared.model_copy(
            update={
                "tool_calls": [
                    {
                        "name": CLARIFICATION_TOOL,
                        "args": _parse_invalid_args(parked.get("args")),
                        "id": call_id,
                        "type": "tool_call",
                    }
                ]
            }
        )
        if self.mode == "interrupt":
            # The tool node asks (a lifecycle hook never interrupts).
            return {"messages": [repaired]}
        answer = self._answer(call_id, _parse_invalid_args(parked.get("args")))
        return {"messages": [repaired, answer], "jump_to": "end"}
