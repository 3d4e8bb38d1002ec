"""PiiRedactionMiddleware (spec 000, number 4, optional): PII never reaches the model.

Deterministic regex detectors (email, phone, payment card with a Luhn check,
US SSN, IPv4, IBAN with its mod-97 check) replace each value with an
irreversible, value-derived placeholder such as ``[EMAIL_3f9a1c0b2d]``: the
same value always gives the same placeholder (so the model can still tell two
addresses apart), and the placeholder is a keyed hash, not the value. Set
``pii_redaction.hash_key`` to a secret so short values (phone numbers) cannot
be recovered by hashing guesses.

Applied to genuine user messages in the model-bound request
(``wrap_model_call``) and to remote-content tool results (``wrap_tool_call``,
the same allowlist as ToolResultSanitization, recorded with
``append_tool_transform``). Other consumers (compaction input, summaries,
titles, memory) call ``redact_text``. It is the innermost of the first-layer
wrappers (registered after the sanitizers).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage, HumanMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from middlewares._tool_results import apply_sized, map_tool_messages, with_text
from middlewares.input_sanitization import ORIGINAL_USER_CONTENT_KEY, is_genuine_user_message
from middlewares.tool_result_sanitization import is_remote_content_tool
from middlewares.tool_transform_meta import append_tool_transform
from runtime.config import PiiRedactionConfig

__all__ = ["ALL_DETECTORS", "PiiRedactionMiddleware", "PiiRedactor", "redact_text"]

ALL_DETECTORS: tuple[str, ...] = ("email", "credit_card", "iban", "ssn", "phone", "ipv4")
_DEFAULT_KEY = b"deerflow-pii-redaction"


def _luhn_ok(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _iban_ok(value: str) -> bool:
    compact = value.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    try:
        number = int("".join(str(int(ch, 36)) for ch in rearranged))
    except ValueError:
        return False
    return number % 97 == 1


def _ssn_ok(value: str) -> bool:
    area, group, serial = value.split("-")
    return (
        area not in ("000", "666")
        and not area.startswith("9")
        and group != "00"
        and serial != "0000"
    )


def _digits(value: str) -> str:
    return re.sub(r"\D", "", value)


@dataclass(frozen=True)
class _Detector:
    name: str
    label: str
    pattern: re.Pattern[str]
    valid: Callable[[str], bool]
    normalize: Callable[[str], str]


_DETECTORS: dict[str, _Detector] = {
    "email": _Detector(
        "email",
        "EMAIL",
        re.compile(
            r"(?<![\w.+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b"
        ),
        lambda v: True,
        str.lower,
    ),
    "credit_card": _Detector(
        "credit_card",
        "CARD",
        re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])"),
        lambda v: 13 <= len(_digits(v)) <= 19 and _luhn_ok(_digits(v)),
        _digits,
    ),
    "iban": _Detector(
        "iban",
        "IBAN",
        re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"),
        _iban_ok,
        lambda v: v.replace(" ", "").upper(),
    ),
    "ssn": _Detector(
        "ssn",
        "SSN",
        re.compile(r"(?<![\w-])\d{3}-\d{2}-\d{4}(?![\w-])"),
        _ssn_ok,
        _digits,
    ),
    "phone": _Detector(
        "phone",
        "PHONE",
        re.compile(
            r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\d{2,4}[ .-])\d{3,4}[ .-]\d{3,4}(?![\w-])"
        ),
        lambda v: 9 <= len(_digits(v)) <= 15,
        _digits,
    ),
    "ipv4": _Detector(
        "ipv4",
        "IP",
        re.compile(
            r"(?<![\w.])(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}(?![\w.])"
        ),
        lambda v: True,
        lambda v: v,
    ),
}


class PiiRedactor:
    """Deterministic redaction with a fixed detector set and key."""

    def __init__(
        self, detectors: Iterable[str] = ALL_DETECTORS, *, hash_key: str | None = None
    ) -> None:
        wanted = set(detectors)
        unknown = wanted - set(_DETECTORS)
        if unknown:
            raise ValueError(f"unknown PII detectors: {sorted(unknown)}")
        self.detectors = tuple(_DETECTORS[name] for name in ALL_DETECTORS if name in wanted)
        self._key = hash_key.encode("utf-8") if hash_key else _DEFAULT_KEY
        self.keyed = bool(hash_key)

    def placeholder(self, detector: _Detector, value: str) -> str:
        digest = hmac.new(
            self._key, f"{detector.name}:{detector.normalize(value)}".encode(), hashlib.sha256
        ).hexdigest()
        return f"[{detector.label}_{digest[:10]}]"

    def redact_counted(self, text: str) -> tuple[str, dict[str, int]]:
        """``text`` with PII replaced, and how many values each detector replaced."""
        counts: dict[str, int] = {}
        for detector in self.detectors:

            def replace(match: re.Match[str], detector: _Detector = detector) -> str:
                value = match.group(0)
                if not detector.valid(value):
                    return value
                counts[detector.name] = counts.get(detector.name, 0) + 1
                return self.placeholder(detector, value)

            text = detector.pattern.sub(replace, text)
        return text, counts

    def redact(self, text: str) -> str:
        return self.redact_counted(text)[0]


_default_redactor = PiiRedactor()


def redact_text(text: str, *, redactor: PiiRedactor | None = None) -> str:
    """Redact PII in ``text`` (for compaction input, summaries, titles, memory)."""
    return (redactor or _default_redactor).redact(text)


class PiiRedactionMiddleware(AgentMiddleware[Any, Any]):
    """Redact PII in user messages (request view) and remote tool results (state)."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(self, redactor: PiiRedactor) -> None:
        super().__init__()
        self.redactor = redactor

    @classmethod
    def from_config(cls, config: PiiRedactionConfig) -> PiiRedactionMiddleware:
        return cls(PiiRedactor(config.detectors, hash_key=config.hash_key))

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "detectors": [d.name for d in self.redactor.detectors],
            "hash_key_set": self.redactor.keyed,
        }

    def _redact_message(self, message: Any) -> tuple[Any, dict[str, int]]:
        totals: dict[str, int] = {}

        def rewrite(text: str) -> str:
            cleaned, counts = self.redactor.redact_counted(text)
            for name, count in counts.items():
                totals[name] = totals.get(name, 0) + count
            return cleaned

        if isinstance(message, ToolMessage):
            return with_text(message, rewrite), totals
        kwargs = message.additional_kwargs or {}
        original = kwargs.get(ORIGINAL_USER_CONTENT_KEY)
        if isinstance(original, str):
            redacted_original = rewrite(original)
            if redacted_original != original:
                message = message.model_copy(
                    update={
                        "additional_kwargs": {
                            **kwargs,
                            ORIGINAL_USER_CONTENT_KEY: redacted_original,
                        }
                    }
                )
        content = message.content
        if isinstance(content, str):
            new: Any = rewrite(content)
        else:
            new = [
                {**b, "text": rewrite(b["text"])}
                if isinstance(b, dict)
                and b.get("type") == "text"
                and isinstance(b.get("text"), str)
                else rewrite(b)
                if isinstance(b, str)
                else b
                for b in content
            ]
        return (message.model_copy(update={"content": new}) if totals else message), totals

    def _redact_request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        messages: list[AnyMessage] = []
        changed = False
        for message in request.messages:
            if is_genuine_user_message(message):
                redacted, counts = self._redact_message(message)
                if counts:
                    assert isinstance(redacted, HumanMessage)
                    message = redacted
                    changed = True
            messages.append(message)
        return request.override(messages=messages) if changed else request

    def _redact_result(self, request: ToolCallRequest, result: Any) -> Any:
        if not is_remote_content_tool(request.tool_call.get("name"), request.tool):
            return result

        def redact(message: ToolMessage) -> ToolMessage:
            redacted, counts = self._redact_message(message)
            if not counts:
                return message
            return append_tool_transform(
                redacted, kind="pii_redaction", producer=self.name, details={"redacted": counts}
            )

        return map_tool_messages(result, redact, tool_call_id=request.tool_call.get("id"))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._redact_request(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._redact_request(request))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self._redact_result(request, handler(request))  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        return await apply_sized(result, self._redact_result, request, result)  # type: ignore[no-any-return]
