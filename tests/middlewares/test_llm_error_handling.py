"""LLMErrorHandlingMiddleware: classification, Retry-After, backoff, circuit breaker.

Every retry test injects the sleeper (recording the delays) and the clocks, so
nothing sleeps and nothing depends on wall-clock time.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core import exceptions as lc_errors
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.errors import GraphInterrupt

from middlewares.llm_error_handling import (
    LLM_ERROR_KEY,
    CircuitBreaker,
    LLMErrorHandlingMiddleware,
    classify_llm_error,
)
from runtime.config import LLMErrorHandlingConfig
from runtime.scripted_model import ScriptedError, make_provider_error
from tests.support.agents import chain_for, make_agent, run_config, settings_for
from tests.support.strict_provider import StrictRecordingModel

NOW = 1_800_000_000.0


def _err(**spec: Any) -> BaseException:
    return make_provider_error(ScriptedError(**spec))


@pytest.mark.parametrize(
    ("error", "kind", "status", "retryable"),
    [
        (_err(status=429), "rate_limited", 429, True),
        (_err(status=429, sdk="openai", retry_after=2), "rate_limited", 429, True),
        (
            _err(
                status=429,
                message="You exceeded your current quota",
                body={"error": {"code": "insufficient_quota"}},
            ),
            "quota",
            429,
            False,
        ),
        (_err(status=529, sdk="anthropic"), "overloaded", 529, True),
        (_err(status=529, message="whatever the body says"), "overloaded", 529, True),
        (_err(status=500), "server_error", 500, True),
        (_err(status=503, sdk="openai"), "server_error", 503, True),
        (_err(status=400, sdk="openai"), "bad_request", 400, False),
        (_err(status=401, sdk="openai"), "auth", 401, False),
        (_err(status=403, sdk="anthropic"), "auth", 403, False),
        (_err(status=402), "quota", 402, False),
        (_err(status=408), "timeout", 408, True),
        (_err(kind="timeout"), "timeout", None, True),
        (_err(kind="timeout", sdk="openai"), "timeout", None, True),
        (_err(kind="connection"), "connection", None, True),
        (_err(kind="connection", sdk="anthropic"), "connection", None, True),
        (httpx.ConnectError("refused"), "connection", None, True),
        (TimeoutError(), "timeout", None, True),
        # Status-less, in-stream errors.
        (_err(kind="stream", code=504), "server_error", 504, True),
        (_err(kind="stream", status="502"), "server_error", 502, True),
        (_err(kind="stream", code=429), "rate_limited", 429, True),
        (_err(kind="stream", message="upstream failed [504] gateway"), "server_error", 504, True),
        (_err(kind="stream", message="proxy said HTTP 502 Bad Gateway"), "server_error", 502, True),
        (_err(kind="stream", type="server_error", message="oops"), "server_error", 500, True),
        (
            _err(kind="stream", sdk="openai", body={"type": "server_error", "message": "x"}),
            "server_error",
            500,
            True,
        ),
        (
            _err(kind="stream", sdk="openai", body={"code": 503, "message": "x"}),
            "server_error",
            503,
            True,
        ),
        (_err(kind="stream", message="overloaded_error: try later"), "overloaded", None, True),
        (_err(kind="stream", message="Rate-Limit exceeded"), "rate_limited", None, True),
        (_err(kind="stream", code="rate_limit_exceeded"), "rate_limited", None, True),
        (_err(kind="stream", message="server-busy"), "rate_limited", None, True),
        (_err(kind="stream", message="something odd"), "unknown", None, False),
        (_err(kind="stream", code="abc", message="[99] nope"), "unknown", None, False),
        (ValueError("bad value"), "unknown", None, False),
        # LangChain's own signals come before the text heuristics.
        (lc_errors.ModelRateLimitError("slow down"), "rate_limited", None, True),
        (lc_errors.ModelAPIError("boom"), "server_error", None, True),
        (lc_errors.ModelTimeoutError("late"), "timeout", None, True),
        (lc_errors.ModelConnectionError("gone"), "connection", None, True),
        (lc_errors.ModelAuthenticationError("rate limit overloaded"), "auth", None, False),
        (lc_errors.ModelInvalidRequestError("server overloaded [503]"), "bad_request", None, False),
        (lc_errors.ContextOverflowError("too long; rate limited"), "bad_request", None, False),
    ],
)
def test_classification(
    error: BaseException, kind: str, status: int | None, retryable: bool
) -> None:
    found = classify_llm_error(error, now=NOW)
    assert (found.kind, found.status, found.retryable) == (kind, status, retryable)


def test_retry_after_numeric_date_ms_and_missing() -> None:
    assert classify_llm_error(_err(status=429, retry_after="7"), now=NOW).retry_after == 7.0
    assert classify_llm_error(_err(status=503, retry_after=1.5), now=NOW).retry_after == 1.5
    when = format_datetime(datetime.fromtimestamp(NOW + 120, tz=UTC), usegmt=True)
    assert classify_llm_error(_err(status=429, retry_after=when), now=NOW).retry_after == 120.0
    past = format_datetime(datetime.fromtimestamp(NOW - 50, tz=UTC), usegmt=True)
    assert classify_llm_error(_err(status=429, retry_after=past), now=NOW).retry_after == 0.0
    assert (
        classify_llm_error(_err(status=429, headers={"retry-after-ms": "250"}), now=NOW).retry_after
        == 0.25
    )
    assert classify_llm_error(_err(status=429, retry_after="soon"), now=NOW).retry_after is None
    assert classify_llm_error(_err(status=429, retry_after="-3"), now=NOW).retry_after is None
    assert classify_llm_error(_err(status=429), now=NOW).retry_after is None


class Recorder:
    """Injected sleepers: record delays, never sleep."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def sleep(self, delay: float) -> None:
        self.delays.append(delay)

    async def asleep(self, delay: float) -> None:
        self.delays.append(delay)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _middleware(
    recorder: Recorder, *, breaker: CircuitBreaker | None = None, **config: Any
) -> LLMErrorHandlingMiddleware:
    return LLMErrorHandlingMiddleware(
        LLMErrorHandlingConfig(**config),
        breaker=breaker,
        wall_clock=lambda: NOW,
        sleep=recorder.sleep,
        asleep=recorder.asleep,
        rng=random.Random(7),
    )


def _agent_with(
    middleware: LLMErrorHandlingMiddleware, model: StrictRecordingModel, tmp_path: Path
) -> Any:
    from middlewares.llm_error_handling import LLMErrorHandlingMiddleware as Cls

    chain = [middleware if isinstance(m, Cls) else m for m in chain_for(settings_for(tmp_path))]
    return make_agent(model, [], middleware=chain)


async def test_run_retries_after_retry_after_then_answers(tmp_path: Path) -> None:
    recorder = Recorder()
    model = StrictRecordingModel.play(
        [{"content": "answer", "errors": [{"status": 429, "retry_after": "7"}, {"status": 529}]}]
    )
    agent = _agent_with(_middleware(recorder, base_delay=2.0, max_delay=10.0), model, tmp_path)
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    assert result["messages"][-1].content == "answer"
    assert recorder.delays[0] == 7.0
    assert 2.0 <= recorder.delays[1] <= 4.0  # jittered backoff for the 529 (attempt 1)
    assert len(model.requests) == 3


async def test_jittered_backoff_grows_and_is_capped(tmp_path: Path) -> None:
    recorder = Recorder()
    model = StrictRecordingModel.play([{"error": {"status": 503}}])
    agent = _agent_with(
        _middleware(recorder, max_retries=5, base_delay=1.0, max_delay=4.0), model, tmp_path
    )
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    final = result["messages"][-1]
    assert final.additional_kwargs[LLM_ERROR_KEY] == {
        "kind": "server_error",
        "status": 503,
        "attempts": 6,
    }
    ceilings = [1.0, 2.0, 4.0, 4.0, 4.0]
    assert len(recorder.delays) == 5
    for delay, ceiling in zip(recorder.delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling


async def test_non_retryable_error_falls_back_immediately(tmp_path: Path) -> None:
    recorder = Recorder()
    model = StrictRecordingModel.play([{"error": {"status": 401, "sdk": "openai"}}])
    agent = _agent_with(_middleware(recorder), model, tmp_path)
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    final = result["messages"][-1]
    assert final.additional_kwargs[LLM_ERROR_KEY]["kind"] == "auth"
    assert "credentials" in final.content
    assert recorder.delays == []
    assert len(model.requests) == 1


async def test_retry_after_longer_than_allowed_is_not_retried(tmp_path: Path) -> None:
    recorder = Recorder()
    model = StrictRecordingModel.play([{"error": {"status": 429, "retry_after": "90000"}}])
    agent = _agent_with(_middleware(recorder), model, tmp_path)
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    info = result["messages"][-1].additional_kwargs[LLM_ERROR_KEY]
    assert info["kind"] == "retry_after_too_long" and info["retry_after"] == 90000.0
    assert recorder.delays == []


async def test_retry_after_up_to_24_hours_is_honoured_when_configured(tmp_path: Path) -> None:
    recorder = Recorder()
    model = StrictRecordingModel.play(
        [{"content": "ok", "errors": [{"status": 429, "retry_after": "86400"}]}]
    )
    agent = _agent_with(_middleware(recorder, retry_after_max_seconds=86_400), model, tmp_path)
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    assert result["messages"][-1].content == "ok"
    assert recorder.delays == [86400.0]


async def test_default_retry_after_cap_is_minutes_not_hours(tmp_path: Path) -> None:
    """An hour-long Retry-After is not waited for by default: the run falls back."""
    assert 60 <= LLMErrorHandlingConfig().retry_after_max_seconds <= 900
    recorder = Recorder()
    model = StrictRecordingModel.play([{"error": {"status": 429, "retry_after": "3600"}}])
    agent = _agent_with(_middleware(recorder), model, tmp_path)
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    info = result["messages"][-1].additional_kwargs[LLM_ERROR_KEY]
    assert info["kind"] == "retry_after_too_long"
    assert recorder.delays == []


async def test_in_stream_error_is_retried_in_a_streamed_run(tmp_path: Path) -> None:
    recorder = Recorder()
    model = StrictRecordingModel.play(
        [
            {
                "content": "streamed answer here",
                "errors": [{"kind": "stream", "message": "upstream [504]", "after_chunks": 1}],
            }
        ]
    )
    agent = _agent_with(_middleware(recorder), model, tmp_path)
    config = run_config()
    tokens: list[str] = []
    async for chunk, _meta in agent.astream(
        {"messages": [HumanMessage("hi")]}, config, stream_mode="messages"
    ):
        if isinstance(chunk.content, str) and chunk.content:
            tokens.append(chunk.content)
    state = await agent.aget_state(config)
    assert state.values["messages"][-1].content == "streamed answer here"
    assert tokens[0] == "streamed "  # the failed attempt had streamed one chunk
    assert len(recorder.delays) == 1


def test_sync_run_uses_the_sync_sleeper(tmp_path: Path) -> None:
    recorder = Recorder()
    model = StrictRecordingModel.play([{"content": "sync ok", "errors": [{"kind": "connection"}]}])
    agent = _agent_with(_middleware(recorder), model, tmp_path)
    result = agent.invoke({"messages": [HumanMessage("hi")]}, run_config())
    assert result["messages"][-1].content == "sync ok"
    assert len(recorder.delays) == 1


# --- circuit breaker -----------------------------------------------------------------


async def test_circuit_opens_fast_fails_then_a_probe_closes_it(tmp_path: Path) -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=2, recovery_timeout=30.0, clock=clock)
    recorder = Recorder()
    failing = StrictRecordingModel.play([{"error": {"status": 503}}])
    agent = _agent_with(_middleware(recorder, breaker=breaker, max_retries=0), failing, tmp_path)
    for _ in range(2):
        await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    assert breaker.state == "open"
    assert len(failing.requests) == 2
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    assert result["messages"][-1].additional_kwargs[LLM_ERROR_KEY]["kind"] == "circuit_open"
    assert len(failing.requests) == 2  # the provider was not called

    clock.now += 30.0
    healthy = StrictRecordingModel.play([{"content": "back"}])
    agent = _agent_with(_middleware(recorder, breaker=breaker, max_retries=0), healthy, tmp_path)
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    assert result["messages"][-1].content == "back"
    assert breaker.state == "closed"


async def test_failed_probe_reopens_and_retries_reenter_admission(tmp_path: Path) -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=10.0, clock=clock)
    recorder = Recorder()
    model = StrictRecordingModel.play([{"error": {"status": 500}}])
    agent = _agent_with(_middleware(recorder, breaker=breaker, max_retries=3), model, tmp_path)
    result = await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    # The first failure opened the circuit, so the retry was refused at admission.
    assert result["messages"][-1].additional_kwargs[LLM_ERROR_KEY]["kind"] == "circuit_open"
    assert len(model.requests) == 1
    clock.now += 10.0
    await agent.ainvoke({"messages": [HumanMessage("hi")]}, run_config())
    assert len(model.requests) == 2  # one probe
    assert breaker.state == "open"


def test_only_the_current_generation_probe_owner_settles() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=5.0, clock=clock)
    old = breaker.admit()
    assert old is not None and not old.probe
    breaker.record_failure(old)
    assert breaker.state == "open"
    assert breaker.admit() is None
    clock.now += 5.0
    probe = breaker.admit()
    assert probe is not None and probe.probe and breaker.state == "half_open"
    assert breaker.admit() is None  # one probe at a time
    breaker.record_success(old)  # a stale ticket changes nothing
    breaker.record_failure(old)
    assert breaker.state == "half_open"
    breaker.release(probe)  # cancelled: the probe slot is free again
    second = breaker.admit()
    assert second is not None and second.probe
    breaker.record_success(probe)  # released ticket no longer owns the probe
    assert breaker.state == "half_open"
    breaker.record_success(second)
    assert breaker.state == "closed"
    breaker.record_failure(second)  # generation moved on: ignored
    assert breaker.failures == 0


def _request() -> ModelRequest[Any]:
    return ModelRequest(
        model=StrictRecordingModel(),
        messages=[HumanMessage("x")],
        system_message=None,
        tool_choice=None,
        tools=[],
        response_format=None,
        state={"messages": []},
        runtime=None,  # type: ignore[arg-type]
    )


async def test_concurrent_half_open_calls_one_probe_others_fast_fail() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=1.0, clock=clock)
    ticket = breaker.admit()
    assert ticket is not None
    breaker.record_failure(ticket)
    clock.now += 1.0
    recorder = Recorder()
    middleware = _middleware(recorder, breaker=breaker)
    gate = asyncio.Event()
    calls = 0

    async def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        nonlocal calls
        calls += 1
        await gate.wait()
        return ModelResponse(result=[AIMessage("probe ok")])

    probe_task = asyncio.create_task(middleware.awrap_model_call(_request(), handler))
    await asyncio.sleep(0)
    other = await middleware.awrap_model_call(_request(), handler)
    assert other.result[0].additional_kwargs[LLM_ERROR_KEY]["kind"] == "circuit_open"  # type: ignore[union-attr]
    gate.set()
    probed = await probe_task
    assert probed.result[0].content == "probe ok"  # type: ignore[union-attr]
    assert calls == 1 and breaker.state == "closed"


async def test_cancellation_propagates_without_retry_or_accounting() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=1.0, clock=clock)
    ticket = breaker.admit()
    assert ticket is not None
    breaker.record_failure(ticket)
    clock.now += 1.0
    recorder = Recorder()
    middleware = _middleware(recorder, breaker=breaker)
    calls = 0

    async def cancelled(request: ModelRequest[Any]) -> ModelResponse[Any]:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await middleware.awrap_model_call(_request(), cancelled)
    assert calls == 1 and recorder.delays == []
    assert breaker.state == "half_open"  # not reopened: no failure was counted
    assert breaker.admit() is not None  # and the probe slot was released


def test_graph_bubble_up_propagates_untouched() -> None:
    recorder = Recorder()
    breaker = CircuitBreaker(failure_threshold=1, recovery_timeout=1.0, clock=FakeClock())
    middleware = _middleware(recorder, breaker=breaker)
    calls = 0

    def interrupt(request: ModelRequest[Any]) -> ModelResponse[Any]:
        nonlocal calls
        calls += 1
        raise GraphInterrupt(())

    with pytest.raises(GraphInterrupt):
        middleware.wrap_model_call(_request(), interrupt)
    assert calls == 1 and recorder.delays == [] and breaker.failures == 0
