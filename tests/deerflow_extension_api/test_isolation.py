"""``IsolatedMiddleware`` holds every row of the failure-isolation table (spec 004)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt.tool_node import ToolCallRequest

from deerflow_extension_api import IsolatedMiddleware, trace_name
from deerflow_extension_api._store import TaskStoreScope
from tests.support.demo_extension import (
    AsyncOnlyToolObserver,
    Recorder,
    StateObserver,
    ToolObserver,
)

ENTRY = "tests.support.demo_extension:install"
NO_RUNTIME = cast(Any, None)


def _request(text: str = "hello") -> ToolCallRequest:
    call = {"name": "echo", "args": {"text": text}, "id": "call_1", "type": "tool_call"}
    return ToolCallRequest(tool_call=call, tool=None, state={}, runtime=None)  # type: ignore[arg-type]


class Downstream:
    """The handler: records each request it receives and answers once per call."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.requests: list[ToolCallRequest] = []
        self.error = error

    def _answer(self, request: ToolCallRequest) -> ToolMessage:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        return ToolMessage(f"real {request.tool_call['args']['text']}", tool_call_id="call_1")

    def __call__(self, request: ToolCallRequest) -> ToolMessage:
        return self._answer(request)

    async def acall(self, request: ToolCallRequest) -> ToolMessage:
        return self._answer(request)


def _isolated(mode: str, cls: type[AgentMiddleware[Any, Any]] = ToolObserver) -> IsolatedMiddleware:
    inner = cls(Recorder(), mode=mode)  # type: ignore[call-arg]
    return IsolatedMiddleware.wrap(
        inner,
        entry_point=ENTRY,
        name=trace_name(ENTRY, cls.__name__, 0),
        task_scope=TaskStoreScope(),
    )


async def _both(mode: str, downstream: Downstream) -> list[Any]:
    """Run the async and the sync path; return both results."""
    middleware = _isolated(mode)
    results = [await middleware.awrap_tool_call(_request(), downstream.acall)]
    results.append(_isolated(mode).wrap_tool_call(_request(), downstream))
    return results


def _diagnostics(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "deerflow_extension_api"]


async def test_raise_before_handler_calls_handler_once_with_the_original(
    caplog: pytest.LogCaptureFixture,
) -> None:
    downstream = Downstream()
    results = await _both("raise_before", downstream)
    assert [r.content for r in results] == ["real hello", "real hello"]
    assert len(downstream.requests) == 2  # once per path
    assert _diagnostics(caplog)[0] == (
        f"Extension {ENTRY}: ToolObserver.awrap_tool_call failed and was skipped: "
        "ToolObserver failed before the handler"
    )


async def test_never_calling_handler_makes_the_host_call_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    downstream = Downstream()
    results = await _both("never_call", downstream)
    assert [r.content for r in results] == ["real hello", "real hello"]
    assert len(downstream.requests) == 2
    assert "never called its handler" in _diagnostics(caplog)[0]


async def test_raise_after_handler_returns_the_real_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    downstream = Downstream()
    results = await _both("raise_after", downstream)
    assert [r.content for r in results] == ["real hello", "real hello"]
    assert len(downstream.requests) == 2
    assert "failed after the handler" in _diagnostics(caplog)[0]


async def test_second_handler_call_raises_in_the_hook_and_first_result_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    downstream = Downstream()
    middleware = _isolated("call_twice")
    result = cast(ToolMessage, await middleware.awrap_tool_call(_request(), downstream.acall))
    assert result.content == "real hello"
    assert len(downstream.requests) == 1  # the second call never reached downstream
    recorder = middleware.inner.recorder  # type: ignore[attr-defined]
    assert any(e[2] == "second call" and "second time" in e[3] for e in recorder.events)
    assert "called its handler a second time" in _diagnostics(caplog)[0]


async def test_modified_request_and_forged_result_are_ignored() -> None:
    downstream = Downstream()
    results = await _both("modify", downstream)
    assert [r.content for r in results] == ["real hello", "real hello"]
    assert [r.tool_call["args"]["text"] for r in downstream.requests] == ["hello", "hello"]


async def test_handler_errors_propagate_unchanged(caplog: pytest.LogCaptureFixture) -> None:
    error = ValueError("tool broke")
    for mode in ("ok", "swallow_handler_error"):
        downstream = Downstream(error)
        with pytest.raises(ValueError) as caught:
            await _isolated(mode).awrap_tool_call(_request(), downstream.acall)
        assert caught.value is error
        assert len(downstream.requests) == 1
    with pytest.raises(ValueError) as caught:
        _isolated("ok").wrap_tool_call(_request(), Downstream(error))
    assert caught.value is error
    assert _diagnostics(caplog) == []


async def test_graph_interrupts_always_propagate() -> None:
    interrupt = GraphInterrupt(())
    downstream = Downstream(interrupt)
    with pytest.raises(GraphInterrupt):
        await _isolated("ok").awrap_tool_call(_request(), downstream.acall)

    class Interrupting(AgentMiddleware[Any, Any, Any]):
        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            raise GraphInterrupt(())

        async def abefore_model(self, state: Any, runtime: Any) -> Any:
            raise GraphInterrupt(())

    wrapped = IsolatedMiddleware.wrap(
        Interrupting(), entry_point=ENTRY, name="x", task_scope=TaskStoreScope()
    )
    with pytest.raises(GraphInterrupt):
        await wrapped.awrap_tool_call(_request(), Downstream().acall)
    with pytest.raises(GraphInterrupt):
        await wrapped.abefore_model({"messages": []}, NO_RUNTIME)


async def test_lifecycle_failures_apply_no_update(caplog: pytest.LogCaptureFixture) -> None:
    raising = _isolated("raise", StateObserver)
    assert await raising.abefore_model({"messages": []}, NO_RUNTIME) is None
    junk = _isolated("junk", StateObserver)
    assert await junk.abefore_model({"messages": []}, NO_RUNTIME) is None
    update = _isolated("update", StateObserver)
    assert await update.abefore_model({"messages": []}, NO_RUNTIME) == {"title": "seen 0 messages"}
    messages = _diagnostics(caplog)
    assert messages[0] == (
        f"Extension {ENTRY}: StateObserver.abefore_model failed and was skipped: "
        "StateObserver lifecycle failure"
    )
    assert "returned int, not a dict state update" in messages[1]


async def test_wrapper_mirrors_the_hooks_and_supplies_the_missing_sync_side() -> None:
    wrapped = _isolated("ok", AsyncOnlyToolObserver)
    assert type(wrapped).wrap_tool_call is not AgentMiddleware.wrap_tool_call
    assert type(wrapped).wrap_model_call is AgentMiddleware.wrap_model_call
    assert type(wrapped).before_model is AgentMiddleware.before_model
    downstream = Downstream()
    result = cast(ToolMessage, wrapped.wrap_tool_call(_request(), downstream))
    assert result.content == "real hello"
    state = _isolated("ok", StateObserver)
    assert type(state).abefore_model is not AgentMiddleware.abefore_model
    assert type(state).before_model is AgentMiddleware.before_model
    assert type(state).awrap_model_call is AgentMiddleware.awrap_model_call


def test_trace_names_replace_unsafe_characters() -> None:
    assert (
        trace_name("deerflow_extension_hello:install", "ToolTimer", 0)
        == "extension_deerflow_extension_hello_install_ToolTimer_0"
    )
    assert trace_name("a.b-c:d e", "K", 3) == "extension_a_b_c_d_e_K_3"


def test_wrapper_forwards_state_schema_and_release_policy() -> None:
    wrapped = _isolated("ok", StateObserver)
    assert wrapped.state_schema is wrapped.inner.state_schema
    assert wrapped.release_policy_parameters() is None
    assert wrapped.tools == []
