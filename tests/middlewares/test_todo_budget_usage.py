"""TodoList (22), TokenBudget (33), TokenUsage (23) and the shared stop reason, hook by hook."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from middlewares._stop_reason import consume_stop_reason
from middlewares.summarization import SummarizationMiddleware, count_request_tokens
from middlewares.todo_list import TodoListMiddleware
from middlewares.token_budget import TokenBudgetMiddleware
from middlewares.token_usage import TokenUsageMiddleware
from runtime.recording_model import clear_recordings, recorded_calls
from runtime.scripted_model import ScriptedChatModel
from subagents.contract import KEY_STATUS, KEY_STOP_REASON, KEY_TOKEN_USAGE
from tests.support.delegation import delegation_config, run_lead, task_call
from tests.support.scripted import ai_text, ai_tools, tool_call

OPEN = [{"content": "write the report", "status": "pending"}, {"content": 7, "status": None}]


def _request(messages: list[Any], state: dict[str, Any]) -> ModelRequest[Any]:
    return ModelRequest(
        model=ScriptedChatModel(),
        messages=messages,
        system_message=SystemMessage("p"),
        tools=[],
        state=cast(Any, {"messages": messages, **state}),
        runtime=None,  # type: ignore[arg-type]
    )


def test_completion_jump_back_once_and_never_after_a_length_stop() -> None:
    todo = TodoListMiddleware()
    wrapped_up = {"messages": [HumanMessage("go"), AIMessage("done", id="a")], "todos": OPEN}
    assert todo.after_model(wrapped_up, None) == {"jump_to": "model"}  # type: ignore[arg-type]
    assert todo.after_model(wrapped_up, None) is None  # type: ignore[arg-type]  # once per run
    todo.before_agent({}, None)  # type: ignore[arg-type]  # a new run starts afresh
    capped = AIMessage("cut", id="b", additional_kwargs={"model_length_termination": True})
    state = {"messages": [HumanMessage("go"), capped], "todos": OPEN}
    assert todo.after_model(state, None) is None  # type: ignore[arg-type]
    done = [{"content": "x", "status": "completed"}]
    assert todo.after_model({**wrapped_up, "todos": done}, None) is None  # type: ignore[arg-type]


def test_a_raising_call_requeues_the_reminder_for_the_retry() -> None:
    todo = TodoListMiddleware()
    todo.after_model(
        {"messages": [HumanMessage("go"), AIMessage("done")], "todos": OPEN},
        None,  # type: ignore[arg-type]
    )
    request = _request([HumanMessage("go"), AIMessage("done")], {"todos": OPEN})
    seen: list[list[Any]] = []

    def failing(r: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.append(list(r.messages))
        raise RuntimeError("provider down")

    with pytest.raises(RuntimeError):
        todo.wrap_model_call(request, failing)

    def ok(r: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.append(list(r.messages))
        return ModelResponse(result=[AIMessage("fine")])

    todo.wrap_model_call(request, ok)
    assert all("unfinished items" in m[-1].text for m in seen)
    assert "write the report" in seen[1][-1].text
    todo.wrap_model_call(request, ok)  # consumed: the third call has no completion reminder
    assert "unfinished items" not in seen[2][-1].text


def test_window_reminder_only_when_write_todos_left_the_request() -> None:
    todo = TodoListMiddleware()
    seen: list[Any] = []

    def ok(r: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.append(r.messages[-1])
        return ModelResponse(result=[AIMessage("fine")])

    todo.wrap_model_call(_request([HumanMessage("go")], {"todos": OPEN}), ok)
    assert "still active" in seen[-1].text and seen[-1].additional_kwargs["hide_from_ui"]
    write = AIMessage("", tool_calls=[{"name": "write_todos", "args": {}, "id": "w"}])
    todo.wrap_model_call(
        _request([HumanMessage("go"), write, ToolMessage("ok", tool_call_id="w")], {"todos": OPEN}),
        ok,
    )
    assert isinstance(seen[-1], ToolMessage)


def _answer(tokens: int, message_id: str, **kwargs: Any) -> AIMessage:
    return AIMessage(
        "",
        id=message_id,
        tool_calls=[{"name": "echo", "args": {}, "id": f"c-{message_id}"}],
        usage_metadata={"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens},
        **kwargs,
    )


def test_budget_counts_each_answer_once_and_caps_with_the_shared_stop_reason() -> None:
    budget = TokenBudgetMiddleware(max_tokens_per_run=100)
    first = budget.after_model({"messages": [HumanMessage("go"), _answer(60, "a")]}, None)  # type: ignore[arg-type]
    assert first is not None
    stamped = first["messages"][0]
    assert stamped.response_metadata["token_budget"]["spent"] == 60 and stamped.tool_calls
    assert budget.after_model({"messages": [HumanMessage("go"), stamped]}, None) is None  # type: ignore[arg-type]
    history = [HumanMessage("go"), stamped, ToolMessage("r", tool_call_id="c-a"), _answer(50, "b")]
    capped = budget.after_model({"messages": history}, None)["messages"][0]  # type: ignore[arg-type,index]
    assert capped.additional_kwargs["stop_reason"] == "token_capped"
    assert not capped.tool_calls and "budget of 100" in capped.text
    assert capped.response_metadata["finish_reason"] == "stop"
    # A new user turn (no run id here) starts from zero.
    later = [*history[:-1], capped, HumanMessage("again"), _answer(50, "c")]
    fresh = budget.after_model({"messages": later}, None)["messages"][0]  # type: ignore[arg-type,index]
    assert fresh.response_metadata["token_budget"]["spent"] == 50 and fresh.tool_calls


def test_consume_stop_reason_keeps_the_first_reason_and_refuses_unknown_ones() -> None:
    stopped = consume_stop_reason(_answer(1, "x"), "loop_capped", "note")
    assert consume_stop_reason(stopped, "token_capped", "other") is stopped
    with pytest.raises(ValueError, match="unknown stop reason"):
        consume_stop_reason(_answer(1, "y"), "bored", "n")  # type: ignore[arg-type]


def test_usage_stamps_each_answer_once_and_attributes_children_once() -> None:
    usage = TokenUsageMiddleware()
    dispatch = _answer(10, "d")
    child = ToolMessage(
        "done",
        id="t",
        tool_call_id="c-d",
        additional_kwargs={
            KEY_STATUS: "completed",
            KEY_TOKEN_USAGE: {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
        },
    )
    first = usage.after_model({"messages": [HumanMessage("go"), dispatch]}, None)  # type: ignore[arg-type]
    assert first is not None
    dispatch = first["messages"][-1]
    answer = AIMessage(
        "ok", id="e", usage_metadata={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}
    )
    state = {"messages": [HumanMessage("go"), dispatch, child, answer]}
    update = usage.after_model(state, None)  # type: ignore[arg-type]
    assert update is not None
    by_id = {m.id: m for m in update["messages"]}
    assert by_id["d"].additional_kwargs["subagent_token_usage"]["total_tokens"] == 7
    assert by_id["t"].additional_kwargs["subagent_token_usage_attributed"] is True
    total = by_id["e"].response_metadata["run_token_usage"]
    assert total["total_tokens"] == 10 + 7 + 4 and total["calls"] == 2
    again = {"messages": [HumanMessage("go"), by_id["d"], by_id["t"], by_id["e"]]}
    assert usage.after_model(again, None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("usage", [False, True], ids=["budget-only", "with-token-usage"])
async def test_a_subagent_has_its_own_budget_and_reports_token_capped(
    usage: bool, tmp_path: Path
) -> None:
    worker = [ai_tools(tool_call("echo", text=f"{n} " * 40)) for n in range(30)]
    path = delegation_config(
        tmp_path,
        lead=[ai_tools(task_call("loop forever")), ai_text("lead done")],
        worker=worker,
    )
    key = f"child-{uuid.uuid4().hex}"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    (entry,) = [m for m in data["models"] if m["name"] == "worker"]
    entry.update(use="runtime.recording_model:RecordingChatModel", recording_key=key)
    data["loop_detection"] = {"enabled": False}
    data["token_usage"] = {"enabled": usage}
    data["token_budget"] = {
        "enabled": True,
        "max_tokens_per_run": 1_000_000,
        "subagent_max_tokens_per_run": 400,
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    run = await run_lead(path)
    (result,) = run.tool_messages()
    assert result.additional_kwargs[KEY_STATUS] == "completed"
    assert result.additional_kwargs[KEY_STOP_REASON] == "token_capped"
    assert run.values["messages"][-1].text == "lead done"
    # The cap comes from the running total, not from one call's size.
    calls = recorded_calls(key)
    assert count_request_tokens(calls[-1].messages) < 400
    clear_recordings(key)


def test_wrap_compacts_the_request_view_when_state_is_still_over_the_trigger() -> None:
    model = ScriptedChatModel.model_validate({"script": [{"content": "SUM"}], "cycle_from": 0})
    middleware = SummarizationMiddleware(
        model=model, summary_model=model, trigger_tokens=200, keep_tokens=60
    )
    messages: list[Any] = [HumanMessage("old " * 200, id="old"), AIMessage("x " * 100, id="a1")]
    messages.append(HumanMessage("latest request", id="u"))
    seen: list[Any] = []

    def handler(r: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.extend(r.messages)
        return ModelResponse(result=[AIMessage("ok")])

    middleware.wrap_model_call(_request(list(messages), {}), handler)
    assert [m.id for m in seen if m.id != seen[0].id] == ["u"]
    assert seen[0].name == "summary" and seen[0].text == "SUM"


def test_a_failing_summary_model_skips_compaction_instead_of_failing_the_run() -> None:
    model = ScriptedChatModel.model_validate(
        {"script": [{"error": {"kind": "status", "status": 400, "message": "bad"}}]}
    )
    middleware = SummarizationMiddleware(
        model=model, summary_model=model, trigger_tokens=200, keep_tokens=60
    )
    messages: list[Any] = [HumanMessage("old " * 200, id="old"), AIMessage("x " * 100, id="a1")]
    messages.append(HumanMessage("latest request", id="u"))
    messages.append(AIMessage("answer", id="a2"))
    assert middleware.after_model({"messages": messages}, None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("system", [SystemMessage("You are the lead."), None])
def test_the_todo_system_prompt_matches_langchains_and_is_built_once(
    system: SystemMessage | None,
) -> None:
    """Ours caches what LangChain's class builds per call; an upgrade changing it fails here."""
    from langchain.agents.middleware import TodoListMiddleware as LangChainTodoList

    def capture(into: list[Any]) -> Any:
        def handler(r: ModelRequest[Any]) -> ModelResponse[Any]:
            into.append(r.system_message)
            return ModelResponse(result=[AIMessage("fine")])

        return handler

    request = _request([HumanMessage("go")], {}).override(system_message=system)
    theirs: list[Any] = []
    ours: list[Any] = []
    LangChainTodoList().wrap_model_call(request, capture(theirs))
    todo = TodoListMiddleware()
    todo.wrap_model_call(request, capture(ours))
    todo.wrap_model_call(request, capture(ours))
    assert ours[0].content == theirs[0].content
    assert ours[1] is ours[0]  # the same system message: built once
    other = request.override(system_message=SystemMessage("Another prompt."))
    todo.wrap_model_call(other, capture(ours))
    assert "Another prompt." in str(ours[2].content) and ours[2] is not ours[0]


def test_usage_is_stamped_on_the_way_out_of_the_model_call_so_after_model_writes_nothing() -> None:
    """One ``messages`` write per step: the model node writes the stamped answer itself."""
    usage = TokenUsageMiddleware()
    history: list[Any] = [HumanMessage("go")]
    for step, tokens in enumerate((10, 4, 6)):
        raw = AIMessage(
            f"answer {step}",
            id=None if step == 1 else f"a{step}",  # a provider that gives no id
            usage_metadata={"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens},
        )
        request = _request(list(history), {})

        def model(_: ModelRequest[Any], raw: AIMessage = raw) -> ModelResponse[Any]:
            return ModelResponse(result=[raw])

        response = usage.wrap_model_call(request, model)
        assert isinstance(response, ModelResponse)
        answer = response.result[-1]
        assert answer.id is not None
        history.append(answer)
        assert usage.after_model({"messages": list(history)}, None) is None  # type: ignore[arg-type]
    total = history[-1].response_metadata["run_token_usage"]
    assert total["total_tokens"] == 20 and total["calls"] == 3
    # An answer that reaches state unstamped (an outer layer replaced it) is stamped there.
    replaced = AIMessage(
        "fallback",
        id="f",
        usage_metadata={"input_tokens": 1, "output_tokens": 0, "total_tokens": 1},
    )
    update = usage.after_model({"messages": [*history, replaced]}, None)  # type: ignore[arg-type]
    assert update is not None
    assert update["messages"][-1].response_metadata["run_token_usage"]["total_tokens"] == 21
