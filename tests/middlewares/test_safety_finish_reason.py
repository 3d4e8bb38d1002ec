"""SafetyFinishReasonMiddleware (optional): no tool runs after a provider safety stop."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import HumanMessage, ToolMessage

from middlewares.safety_finish_reason import SAFETY_TERMINATION_KEY, SafetyFinishReasonMiddleware
from runtime.config import Settings
from tests.support.agents import chain_for, make_agent, run_config, settings_for
from tests.support.reliability_tools import web_fetch
from tests.support.strict_provider import StrictRecordingModel

FILTERED = {
    "content": [{"type": "tool_use", "id": "x", "name": "web_fetch", "input": {"url": "u"}}],
    "tool_calls": [{"name": "web_fetch", "args": {"url": "u"}, "id": "x"}],
    "response_metadata": {"finish_reason": "content_filter"},
}


def _settings(tmp_path: Path, enabled: bool) -> Settings:
    return settings_for(tmp_path, safety_finish_reason={"enabled": enabled})


def test_optional_and_registered_last(tmp_path: Path) -> None:
    assert not any(
        isinstance(m, SafetyFinishReasonMiddleware) for m in chain_for(_settings(tmp_path, False))
    )
    chain = chain_for(_settings(tmp_path, True))
    # Last but for Clarification (40), which is always the final entry.
    assert type(chain[-1]).__name__ == "ClarificationMiddleware"
    assert isinstance(chain[-2], SafetyFinishReasonMiddleware)


async def test_safety_stop_suppresses_tool_calls(tmp_path: Path) -> None:
    model = StrictRecordingModel.play([FILTERED, {"content": "should not be reached"}])
    agent = make_agent(model, [web_fetch], settings=_settings(tmp_path, True))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, run_config())
    final = result["messages"][-1]
    assert not any(isinstance(m, ToolMessage) for m in result["messages"])
    assert final.tool_calls == []
    assert not any(isinstance(b, dict) and b.get("type") == "tool_use" for b in final.content)
    assert "safety reasons (content_filter)" in final.content[-1]["text"]
    assert final.additional_kwargs[SAFETY_TERMINATION_KEY] == {
        "finish_reason": "content_filter",
        "suppressed_tool_calls": 1,
    }
    assert len(model.requests) == 1


async def test_disabled_lets_the_calls_run(tmp_path: Path) -> None:
    model = StrictRecordingModel.play([FILTERED, {"content": "after tools"}])
    agent = make_agent(model, [web_fetch], settings=_settings(tmp_path, False))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, run_config())
    assert any(isinstance(m, ToolMessage) for m in result["messages"])
