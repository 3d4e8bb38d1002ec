"""LLMErrorHandlingMiddleware (spec 000, number 9): provider failures end well.

A model call that raises is classified (``classify_llm_error``). LangChain's
own signals come first: a ``langchain_core.exceptions.ModelError`` that a
provider integration raises says what it is (rate limit, timeout, connection,
5xx, auth) and whether it is retryable; the rules below (status, then text)
serve errors that carry no such type:

- transient, retried: timeouts, connection errors, 408/409/425, 429 rate limits,
  5xx and 529 (transient by status, whatever the body says);
- final, not retried: quota/billing (402, or a 429 that says quota), auth
  (401/403), other 4xx.

A status-less error (raised inside a stream) takes a 4xx/5xx status from a
numeric ``code``/``status`` (attribute or body), a ``[504]`` or ``HTTP 502`` in
its text, or ``type: server_error``; failing those, a "busy" phrase in its text
(``_`` and ``-`` read as spaces, so ``overloaded_error`` matches) makes it
transient.

Retries wait for the provider's ``Retry-After`` (seconds or an HTTP date,
honoured up to ``retry_after_max_seconds``, 5 minutes by default so a worker
is not held for hours; a longer hint is not retried) or else for a jittered exponential backoff. Every attempt, retries
included, passes the circuit breaker's admission. When retries are exhausted,
the error is final, or the circuit is open, the run gets a fallback
``AIMessage`` (marked ``deerflow_llm_error``) instead of an exception.

Cancellation (``CancelledError`` and other ``BaseException``s) and LangGraph's
``GraphBubbleUp`` (interrupts) propagate untouched: no retry, no failure
counted, and a half-open probe they held is released for the next caller.

The circuit breaker (closed, open, half-open) is per model entry and per
process. Only the owner of the current generation's half-open probe settles
it; a call admitted in an older generation finishing late changes nothing.
Clock and sleep are injectable, so tests never sleep.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core import exceptions as lc_errors
from langchain_core.messages import AIMessage
from langgraph.errors import GraphBubbleUp

from runtime.config import LLMErrorHandlingConfig, ModelConfig
from runtime.messages import LLM_ERROR_KEY
from runtime.retry_after import retry_after_from_error

__all__ = [
    "LLM_ERROR_KEY",
    "CircuitBreaker",
    "CircuitTicket",
    "LLMErrorClass",
    "LLMErrorHandlingMiddleware",
    "classify_llm_error",
    "get_circuit_breaker",
]

logger = logging.getLogger(__name__)


ErrorKind = Literal[
    "timeout",
    "connection",
    "rate_limited",
    "overloaded",
    "server_error",
    "quota",
    "auth",
    "bad_request",
    "unknown",
]

_TRANSIENT_KINDS: tuple[str, ...] = (
    "timeout",
    "connection",
    "rate_limited",
    "overloaded",
    "server_error",
)


@dataclass(frozen=True)
class LLMErrorClass:
    """How one provider error is handled."""

    kind: ErrorKind
    status: int | None
    retry_after: float | None
    detail: str

    @property
    def retryable(self) -> bool:
        return self.kind in _TRANSIENT_KINDS

    @property
    def counts_for_circuit(self) -> bool:
        return self.kind in _TRANSIENT_KINDS


_BRACKET_STATUS = re.compile(r"\[(\d{3})\]")
_HTTP_STATUS = re.compile(r"\bHTTP(?:/\d(?:\.\d)?)?[\s:]+(\d{3})\b", re.IGNORECASE)
_QUOTA = re.compile(
    r"insufficient quota|quota|billing|credit balance|payment required|spend limit", re.IGNORECASE
)
_AUTH = re.compile(
    r"invalid api key|incorrect api key|authentication|unauthori[sz]ed|permission denied",
    re.IGNORECASE,
)
_BUSY = re.compile(
    r"overloaded|server (?:is )?busy|service busy|too many requests|rate limit|rate limited"
    r"|temporarily unavailable|service unavailable|try again later|capacity|resource exhausted",
    re.IGNORECASE,
)


def _status_value(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    else:
        return None
    return number if 400 <= number <= 599 else None


def _body_of(error: BaseException) -> Mapping[str, Any]:
    body = getattr(error, "body", None)
    return body if isinstance(body, Mapping) else {}


def _http_status(error: BaseException) -> int | None:
    for name in ("status_code", "http_status"):
        found = _status_value(getattr(error, name, None))
        if found is not None:
            return found
    response = getattr(error, "response", None)
    if response is not None:
        found = _status_value(getattr(response, "status_code", None))
        if found is not None:
            return found
    return None


def _streamed_status(error: BaseException, text: str) -> int | None:
    """The status a status-less (in-stream) error implies, if any."""
    body = _body_of(error)
    found_nested = body.get("error")
    nested: Mapping[str, Any] = found_nested if isinstance(found_nested, Mapping) else {}
    for source in (error, body, nested):
        for key in ("code", "status"):
            value = getattr(source, key, None) if source is error else source.get(key)  # type: ignore[union-attr]
            found = _status_value(value)
            if found is not None:
                return found
    for pattern in (_BRACKET_STATUS, _HTTP_STATUS):
        match = pattern.search(text)
        if match:
            found = _status_value(match.group(1))
            if found is not None:
                return found
    types = [getattr(error, "type", None), body.get("type"), nested.get("type")]
    if any(isinstance(t, str) and t == "server_error" for t in types):
        return 500
    return None


def _class_names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def _error_text(error: BaseException) -> str:
    parts = [str(error)]
    message = getattr(error, "message", None)
    if isinstance(message, str) and message not in parts[0]:
        parts.append(message)
    for key in ("code", "type"):
        value = getattr(error, key, None)
        if isinstance(value, str) and value:
            parts.append(value)
    body = _body_of(error)
    if body:
        parts.append(repr(dict(body))[:2000])
    return " ".join(parts)[:4000]


def classify_llm_error(error: BaseException, *, now: float | None = None) -> LLMErrorClass:
    """Classify a model-call exception (see the module docstring for the rules)."""
    wall = time.time() if now is None else now
    text = _error_text(error)
    detail = text[:300]
    retry_after = retry_after_from_error(error, now=wall)
    names = _class_names(error)
    status = _http_status(error)
    if isinstance(error, lc_errors.ModelError):
        return LLMErrorClass(_kind_for_langchain(error, status, text), status, retry_after, detail)
    if status is None:
        if isinstance(error, TimeoutError | asyncio.TimeoutError) or any(
            "Timeout" in name for name in names
        ):
            return LLMErrorClass("timeout", None, retry_after, detail)
        if isinstance(error, ConnectionError) or any(
            marker in name
            for name in names
            for marker in ("Connection", "ConnectError", "NetworkError", "RemoteProtocolError")
        ):
            return LLMErrorClass("connection", None, retry_after, detail)
        status = _streamed_status(error, text)
    if status is None:
        spaced = text.replace("_", " ").replace("-", " ")
        if _BUSY.search(spaced):
            kind: ErrorKind = "overloaded" if "overload" in spaced.lower() else "rate_limited"
            return LLMErrorClass(kind, None, retry_after, detail)
        return LLMErrorClass("unknown", None, retry_after, detail)
    return LLMErrorClass(_kind_for_status(status, text), status, retry_after, detail)


def _kind_for_langchain(error: lc_errors.ModelError, status: int | None, text: str) -> ErrorKind:
    """The kind of a LangChain ``ModelError``: its type, then its status; its
    ``is_retryable`` decides between transient and final, never the text."""
    if isinstance(error, lc_errors.ModelTimeoutError):
        return "timeout"
    if isinstance(error, lc_errors.ModelConnectionError):
        return "connection"
    if isinstance(error, lc_errors.ModelRateLimitError):
        return _kind_for_status(429, text)
    if isinstance(error, lc_errors.ModelAuthenticationError | lc_errors.ModelPermissionDeniedError):
        return "auth"
    if status is not None:
        kind = _kind_for_status(status, text)
        if (kind in _TRANSIENT_KINDS) == bool(error.is_retryable):
            return kind
    return "server_error" if error.is_retryable else "bad_request"


def _kind_for_status(status: int, text: str) -> ErrorKind:
    if status == 529:
        return "overloaded"
    if status == 429:
        return "quota" if _QUOTA.search(text.replace("_", " ")) else "rate_limited"
    if status == 402:
        return "quota"
    if status in (401, 403):
        return "auth"
    if status == 408:
        return "timeout"
    if status in (409, 425):
        return "rate_limited"
    if status == 501 or status == 505:
        return "bad_request"
    if status >= 500:
        return "server_error"
    if _AUTH.search(text) and status == 400:
        return "auth"
    return "bad_request"


# --- circuit breaker -------------------------------------------------------------


@dataclass(eq=False)
class CircuitTicket:
    """Admission to one model call: its generation, and whether it is the probe."""

    generation: int
    probe: bool


@dataclass
class CircuitBreaker:
    """Closed (healthy), open (fast-fail), half-open (one probe tests recovery).

    Thread-safe; the lock is held only for bookkeeping, never across a call,
    so sync and async callers share one breaker.
    """

    failure_threshold: int = 5
    recovery_timeout: float = 30.0
    clock: Callable[[], float] = time.monotonic
    state: Literal["closed", "open", "half_open"] = "closed"
    failures: int = 0
    generation: int = 0
    opened_at: float | None = None
    _probe: CircuitTicket | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def admit(self) -> CircuitTicket | None:
        """A ticket for one call, or None when the call must fail fast."""
        with self._lock:
            if self.state == "open":
                assert self.opened_at is not None
                if self.clock() - self.opened_at < self.recovery_timeout:
                    return None
                self.state = "half_open"
                self.generation += 1
                self._probe = None
            if self.state == "half_open":
                if self._probe is not None:
                    return None
                self._probe = CircuitTicket(self.generation, probe=True)
                return self._probe
            return CircuitTicket(self.generation, probe=False)

    def _owns(self, ticket: CircuitTicket) -> bool:
        if ticket.generation != self.generation:
            return False
        return not ticket.probe or self._probe is ticket

    def _open(self) -> None:
        self.state = "open"
        self.opened_at = self.clock()
        self.generation += 1
        self._probe = None
        self.failures = 0

    def record_success(self, ticket: CircuitTicket) -> None:
        """The provider answered (even with a final 4xx): close if this owns the probe."""
        with self._lock:
            if not self._owns(ticket):
                return
            if ticket.probe:
                self.state = "closed"
                self.generation += 1
                self._probe = None
            self.failures = 0

    def record_failure(self, ticket: CircuitTicket) -> None:
        """A transient provider failure: count it, or reopen on a failed probe."""
        with self._lock:
            if not self._owns(ticket):
                return
            if ticket.probe:
                self._open()
                return
            self.failures += 1
            if self.failures >= self.failure_threshold:
                self._open()

    def release(self, ticket: CircuitTicket) -> None:
        """Give back a ticket without an outcome (cancelled): frees a held probe."""
        with self._lock:
            if ticket.probe and self._owns(ticket):
                self._probe = None


_breakers: dict[str, CircuitBreaker] = {}
_breakers_lock = threading.Lock()


def get_circuit_breaker(
    key: str, *, failure_threshold: int, recovery_timeout: float
) -> CircuitBreaker:
    """The process-wide breaker for ``key`` (graphs are rebuilt per run; breakers are not)."""
    full_key = f"{key}|{failure_threshold}|{recovery_timeout}"
    with _breakers_lock:
        breaker = _breakers.get(full_key)
        if breaker is None:
            breaker = CircuitBreaker(failure_threshold, recovery_timeout)
            _breakers[full_key] = breaker
        return breaker


# --- the middleware -----------------------------------------------------------------

_FALLBACK_TEXT: dict[str, str] = {
    "circuit_open": (
        "The model provider has been failing repeatedly, so this request was not sent. "
        "Please try again in a moment."
    ),
    "timeout": "The model provider did not answer in time{attempts}. Please try again.",
    "connection": "The model provider could not be reached{attempts}. Please try again.",
    "rate_limited": "The model provider is rate limiting requests{status}{attempts}. Please try again later.",
    "overloaded": "The model provider is overloaded{status}{attempts}. Please try again later.",
    "server_error": "The model provider had an internal error{status}{attempts}. Please try again.",
    "quota": "The model provider refused the request: the account's quota or billing limit is reached{status}.",
    "auth": "The model provider rejected this deployment's credentials{status}. An operator needs to check the API key.",
    "bad_request": "The model provider rejected the request{status}: {detail}",
    "unknown": "The model call failed: {detail}",
    "retry_after_too_long": (
        "The model provider asked to wait {wait} before retrying, which is longer than this "
        "deployment allows{status}. Please try again later."
    ),
}


class LLMErrorHandlingMiddleware(AgentMiddleware[Any, Any]):
    """Retry transient provider errors, trip a circuit breaker, fall back cleanly."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        config: LLMErrorHandlingConfig,
        *,
        breaker: CircuitBreaker | None = None,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.breaker = breaker
        self.wall_clock = wall_clock
        self.sleep = sleep
        self.asleep = asleep
        self.rng = rng or random.Random()

    @classmethod
    def from_config(
        cls, config: LLMErrorHandlingConfig, model: ModelConfig, *, scope: str = ""
    ) -> LLMErrorHandlingMiddleware:
        """The middleware for one model entry, sharing that entry's process-wide breaker.

        The breaker key is the entry's full definition (so editing the entry starts
        a fresh breaker) plus ``scope`` (the deployment's data root).
        """
        breaker = None
        if config.circuit_breaker.enabled:
            definition = hashlib.sha256(model.model_dump_json().encode()).hexdigest()[:16]
            breaker = get_circuit_breaker(
                f"{model.name}|{definition}|{scope}",
                failure_threshold=config.circuit_breaker.failure_threshold,
                recovery_timeout=config.circuit_breaker.recovery_timeout,
            )
        return cls(config, breaker=breaker)

    def release_policy_parameters(self) -> dict[str, Any]:
        return self.config.model_dump(mode="json")

    # --- decisions ------------------------------------------------------------------

    def _admit(self) -> CircuitTicket | Literal[False] | None:
        """A ticket, None without a breaker, or False when the circuit rejects."""
        if self.breaker is None:
            return None
        ticket = self.breaker.admit()
        return False if ticket is None else ticket

    def _settle(self, ticket: CircuitTicket | None, error: LLMErrorClass | None) -> None:
        if self.breaker is None or ticket is None:
            return
        if error is not None and error.counts_for_circuit:
            self.breaker.record_failure(ticket)
        else:
            self.breaker.record_success(ticket)

    def _release(self, ticket: CircuitTicket | None) -> None:
        if self.breaker is not None and ticket is not None:
            self.breaker.release(ticket)

    def _delay(self, error: LLMErrorClass, attempt: int) -> float | None:
        """Seconds before the next attempt, or None when the hint is too long to honour."""
        if error.retry_after is not None:
            if error.retry_after > self.config.retry_after_max_seconds:
                return None
            return error.retry_after
        ceiling = min(self.config.max_delay, self.config.base_delay * (2**attempt))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def _fallback(
        self, kind: str, error: LLMErrorClass | None, attempts: int
    ) -> ModelResponse[Any]:
        status = f" (HTTP {error.status})" if error is not None and error.status else ""
        wait = ""
        if error is not None and error.retry_after is not None:
            wait = f"{error.retry_after / 3600:.1f} hours"
        text = _FALLBACK_TEXT[kind].format(
            status=status,
            attempts=f" after {attempts} attempts" if attempts > 1 else "",
            detail=(error.detail if error is not None else "") or "no detail",
            wait=wait,
        )
        info: dict[str, Any] = {
            "kind": kind,
            "status": error.status if error is not None else None,
            "attempts": attempts,
        }
        if error is not None and error.retry_after is not None:
            info["retry_after"] = error.retry_after
        logger.warning("model call failed (%s, attempts=%d): %s", kind, attempts, error)
        message = AIMessage(
            content=text,
            additional_kwargs={LLM_ERROR_KEY: info},
            response_metadata={"finish_reason": "error"},
        )
        return ModelResponse(result=[message])

    def _after_error(
        self, exc: Exception, ticket: CircuitTicket | None, attempt: int
    ) -> tuple[float | None, ModelResponse[Any] | None]:
        """Settle the breaker; return (delay before retry, or a final fallback)."""
        error = classify_llm_error(exc, now=self.wall_clock())
        self._settle(ticket, error)
        if not error.retryable or attempt >= self.config.max_retries:
            return None, self._fallback(error.kind, error, attempt + 1)
        delay = self._delay(error, attempt)
        if delay is None:
            return None, self._fallback("retry_after_too_long", error, attempt + 1)
        logger.info(
            "model call failed (%s, status=%s); retry %d in %.2fs",
            error.kind,
            error.status,
            attempt + 1,
            delay,
        )
        return delay, None

    # --- hooks -------------------------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        attempt = 0
        while True:
            ticket = self._admit()
            if ticket is False:
                return self._fallback("circuit_open", None, attempt)
            try:
                response = handler(request)
            except GraphBubbleUp:
                self._release(ticket)
                raise
            except Exception as exc:
                delay, fallback = self._after_error(exc, ticket, attempt)
                if fallback is not None:
                    return fallback
                assert delay is not None
                attempt += 1
                self.sleep(delay)
                continue
            except BaseException:
                self._release(ticket)
                raise
            self._settle(ticket, None)
            return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        attempt = 0
        while True:
            ticket = self._admit()
            if ticket is False:
                return self._fallback("circuit_open", None, attempt)
            try:
                response = await handler(request)
            except GraphBubbleUp:
                self._release(ticket)
                raise
            except Exception as exc:
                delay, fallback = self._after_error(exc, ticket, attempt)
                if fallback is not None:
                    return fallback
                assert delay is not None
                attempt += 1
                await self.asleep(delay)
                continue
            except BaseException:
                self._release(ticket)
                raise
            self._settle(ticket, None)
            return response
