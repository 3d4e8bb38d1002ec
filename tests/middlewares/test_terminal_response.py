"""TerminalResponseMiddleware: one hidden retry, then a visible error, never a blank success."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from middlewares.terminal_response import FALLBACK_TEXT, RECOVERY_PROMPT, RUN_OUTCOME_KEY
from tests.support.agents import make_agent, run_config, settings_for
from tests.support.reliability_tools import web_fetch
from tests.support.strict_provider import StrictRecordingModel

TOOL_TURN: dict[str, Any] = {"tool_calls": [{"name": "web_fetch", "args": {"url": "u"}, "id": "f"}]}


async def _run(
    script: list[dict[str, Any]], tmp_path: Path
) -> tuple[dict[str, Any], StrictRecordingModel, list[Any]]:
    model = StrictRecordingModel.play(script)
    agent = make_agent(model, [web_fetch], settings=settings_for(tmp_path))
    config = run_config()
    events: list[Any] = []
    async for mode, chunk in agent.astream(
        {"messages": [HumanMessage("go")]}, config, stream_mode=["custom", "values"]
    ):
        if mode == "custom":
            events.append(chunk)
    state = await agent.aget_state(config)
    return state.values, model, events


async def test_empty_answer_after_tools_is_retried_with_a_hidden_prompt(tmp_path: Path) -> None:
    # Turn 1 is empty (a block with an unhashable type is not visible text). The hidden
    # retry adds no AI message, so the scripted model replays turn 1: empty again.
    script: list[dict[str, Any]] = [TOOL_TURN, {"content": [{"type": []}]}, {"content": "unused"}]
    result, model, events = await _run(script, tmp_path)
    final = result["messages"][-1]
    assert final.content == FALLBACK_TEXT
    assert final.additional_kwargs[RUN_OUTCOME_KEY] == "error"
    assert len(model.requests) == 3
    recovery = model.requests[2][-1]
    assert isinstance(recovery, HumanMessage) and recovery.content == RECOVERY_PROMPT
    assert recovery.additional_kwargs["hide_from_ui"] is True
    assert not any(m.content == RECOVERY_PROMPT for m in result["messages"])
    assert {"type": "run_error", "reason": "empty_terminal_response"} in events


async def test_retry_that_answers_is_used(tmp_path: Path) -> None:
    class FlakyEmpty(StrictRecordingModel):
        def _message_for(self, messages: Any) -> AIMessage:
            message = super()._message_for(messages)
            if messages and messages[-1].content == RECOVERY_PROMPT:
                return message.model_copy(update={"content": "recovered answer"})
            return message

    model = FlakyEmpty.play([TOOL_TURN, {"content": ""}])
    agent = make_agent(model, [web_fetch], settings=settings_for(tmp_path))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, run_config())
    assert result["messages"][-1].content == "recovered answer"
    assert RUN_OUTCOME_KEY not in result["messages"][-1].additional_kwargs


async def test_empty_first_turn_without_tools_is_not_touched(tmp_path: Path) -> None:
    result, model, _ = await _run([{"content": ""}], tmp_path)
    assert result["messages"][-1].content == ""
    assert len(model.requests) == 1


async def test_safety_stops_are_left_to_the_safety_middleware(tmp_path: Path) -> None:
    script: list[dict[str, Any]] = [
        TOOL_TURN,
        {"content": "", "response_metadata": {"finish_reason": "content_filter"}},
    ]
    result, model, _ = await _run(script, tmp_path)
    assert len(model.requests) == 2
    assert RUN_OUTCOME_KEY not in result["messages"][-1].additional_kwargs
