"""ModelLengthFinishReasonMiddleware: a length-capped answer ends the tool loop visibly."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import HumanMessage, ToolMessage

from middlewares.model_length_finish_reason import MODEL_LENGTH_TERMINATION_KEY
from tests.support.agents import make_agent, run_config, settings_for
from tests.support.reliability_tools import web_fetch
from tests.support.strict_provider import StrictRecordingModel


async def test_truncated_tool_calls_are_suppressed_and_noted(tmp_path: Path) -> None:
    model = StrictRecordingModel.play(
        [
            {
                "content": [
                    {"type": "reasoning", "reasoning": "hmm"},
                    {"type": "text", "text": "Partial answ"},
                ],
                "tool_calls": [{"name": "web_fetch", "args": {"url": "https://cut"}, "id": "cut"}],
                "additional_kwargs": {
                    "tool_calls": [
                        {
                            "id": "cut",
                            "type": "function",
                            "function": {"name": "web_fetch", "arguments": '{"url": "https://cu'},
                        }
                    ]
                },
                "response_metadata": {"finish_reason": "length"},
            }
        ]
    )
    agent = make_agent(model, [web_fetch], settings=settings_for(tmp_path))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, run_config())
    final = result["messages"][-1]
    assert not any(isinstance(m, ToolMessage) for m in result["messages"])  # the loop ended
    assert final.tool_calls == [] and "tool_calls" not in final.additional_kwargs
    assert final.content[0] == {"type": "reasoning", "reasoning": "hmm"}
    assert final.content[1] == {"type": "text", "text": "Partial answ"}
    assert "output length limit" in final.content[-1]["text"]
    assert final.additional_kwargs[MODEL_LENGTH_TERMINATION_KEY] is True
    assert final.additional_kwargs["stop_reason"] == "model_length_capped"


async def test_empty_length_stop_gets_a_notice(tmp_path: Path) -> None:
    model = StrictRecordingModel.play(
        [{"content": "", "response_metadata": {"finish_reason": "MAX_TOKENS"}}]
    )
    agent = make_agent(model, [], settings=settings_for(tmp_path))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, run_config())
    assert "output length limit" in result["messages"][-1].content


async def test_normal_answers_pass_through(tmp_path: Path) -> None:
    model = StrictRecordingModel.play([{"content": "fine"}])
    agent = make_agent(model, [], settings=settings_for(tmp_path))
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, run_config())
    assert result["messages"][-1].content == "fine"
    assert MODEL_LENGTH_TERMINATION_KEY not in result["messages"][-1].additional_kwargs
