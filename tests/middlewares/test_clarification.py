"""ClarificationMiddleware: a real agent pauses on ask_clarification; forms normalize."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from middlewares.clarification import (
    MAX_FIELDS,
    MAX_FORM_SERIALIZED_BYTES,
    ClarificationMiddleware,
    build_clarification_payload,
)
from runtime.state import ThreadState
from tests.support.strict_provider import StrictRecordingModel, check_strict_request
from tools.clarification import ask_clarification, for_clarification_mode

RAN: list[str] = []


@tool
async def side_effect(text: str) -> str:
    """Record that it ran (must not run before the user answers)."""
    RAN.append(text)
    return f"ran {text}"


def _agent(script: list[dict[str, Any]], mode: str = "end") -> tuple[Any, StrictRecordingModel]:
    model = StrictRecordingModel.model_validate({"script": script})
    agent = create_agent(
        model,
        [for_clarification_mode(ask_clarification, mode), side_effect],
        middleware=[ClarificationMiddleware(mode=mode)],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    return agent, model


ASK = {
    "name": "ask_clarification",
    "args": {"question": "Which format?", "options": ["CSV", " csv ", "", "JSON"]},
}


async def test_pauses_run_and_drops_sibling_calls() -> None:
    RAN.clear()
    agent, model = _agent(
        [
            {"tool_calls": [{"name": "side_effect", "args": {"text": "early"}}, ASK]},
            {"content": "never"},
        ]
    )
    config = {"configurable": {"thread_id": "c1"}}
    result = await agent.ainvoke({"messages": [HumanMessage("export it")]}, config)
    assert RAN == []
    ai, answer = result["messages"][-2:]
    assert isinstance(ai, AIMessage) and [c["name"] for c in ai.tool_calls] == ["ask_clarification"]
    assert isinstance(answer, ToolMessage) and answer.tool_call_id == ai.tool_calls[0]["id"]
    payload = answer.artifact["human_input"]
    assert payload["version"] == 1 and payload["mode"] == "choice_with_other"
    assert payload["options"] == ["CSV", "csv", "JSON"]
    assert "Which format?" in answer.text and "1. CSV" in answer.text
    assert len(model.requests) == 1  # the run ended at the question

    # The user answers: the conversation resumes and stays protocol-valid.
    followup = await agent.ainvoke({"messages": [HumanMessage("CSV please")]}, config)
    assert followup["messages"][-1].content == "never"
    assert check_strict_request(model.requests[-1]) == []


async def test_disable_clarification_keeps_siblings() -> None:
    RAN.clear()
    agent, _ = _agent(
        [{"tool_calls": [{"name": "side_effect", "args": {"text": "kept"}}, ASK]}, {"content": "x"}]
    )
    config = {"configurable": {"thread_id": "c2", "disable_clarification": True}}
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert RAN == ["kept"]
    # Nobody can answer: the model is told so and the run goes on to its answer.
    answer = next(m for m in result["messages"] if getattr(m, "name", None) == "ask_clarification")
    assert answer.status == "error" and "disabled" in answer.text
    assert result["messages"][-1].content == "x"


async def test_malformed_question_on_invalid_tool_calls_is_a_stop_signal() -> None:
    RAN.clear()
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "side_effect", "args": {"text": "sibling"}}],
            "invalid_tool_calls": [
                {"name": "ask_clarification", "args": '{"question": "Which year?"', "id": "bad1"}
            ],
        },
        {"content": "after"},
    ]
    agent, model = _agent(script)
    config = {"configurable": {"thread_id": "c3"}}
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert RAN == []
    ai, answer = result["messages"][-2:]
    assert ai.invalid_tool_calls == [] and [c["id"] for c in ai.tool_calls] == ["bad1"]
    assert isinstance(answer, ToolMessage) and answer.tool_call_id == "bad1"
    assert answer.artifact["human_input"]["mode"] == "free_text"
    await agent.ainvoke({"messages": [HumanMessage("2024")]}, config)
    assert check_strict_request(model.requests[-1]) == []


def test_form_payload_is_version_2_and_normalized() -> None:
    payload = build_clarification_payload(
        {
            "question": "Details?",
            "fields": [
                {"name": "title", "label": "Title", "type": "text", "required": True},
                {"name": "kind", "type": "select", "options": {"option": ["<b>A</b>", "A", " B "]}},
                {"name": "empty_select", "type": "select", "options": ["", "  "]},
                {"name": "odd", "type": []},
                {"name": "weird", "type": {"x": 1}},
                {"name": "agree", "type": "checkbox", "required": True},
            ],
        }
    )
    assert payload["version"] == 2 and payload["mode"] == "form"
    fields = {f["name"]: f for f in payload["fields"]}
    assert fields["kind"]["options"] == ["A", "B"]
    assert fields["empty_select"]["type"] == "text" and "options" not in fields["empty_select"]
    assert fields["odd"]["type"] == "text" and fields["weird"]["type"] == "text"
    assert fields["agree"]["default"] is False and fields["agree"]["consent"] is True
    assert fields["title"]["label"] == "Title" and fields["title"]["required"] is True


@pytest.mark.parametrize(
    "fields",
    [
        ["not a dict"],
        [{"name": "a"}, {"name": "a"}],
        [{"name": "__proto__"}],
        [{"name": "constructor"}],
        [{"name": "has space"}],
        [{"name": f"f{i}"} for i in range(MAX_FIELDS + 1)],
        [{"name": "s", "type": "select", "options": [f"o{i}" for i in range(25)]}],
        [{"name": "long", "label": "x" * 201}],
        [
            {"name": f"f{i}", "type": "select", "options": [f"{j}" + "y" * 190 for j in range(24)]}
            for i in range(16)
        ],
        [],
        "not a list",
    ],
)
def test_broken_form_degrades_whole_form(fields: Any) -> None:
    payload = build_clarification_payload(
        {"question": "Q?", "options": ["one", "two"], "fields": fields}
    )
    assert payload["version"] == 1
    assert payload["mode"] == "choice_with_other" and payload["options"] == ["one", "two"]
    assert payload["degraded_from_form"]


def test_size_cap_is_in_utf8_bytes() -> None:
    # 16 x 24 options x 30 characters is under 16K characters but over 16 KiB in UTF-8.
    fields = [
        {"name": f"f{i}", "type": "select", "options": [f"{j:02d}" + "é" * 28 for j in range(24)]}
        for i in range(16)
    ]
    payload = build_clarification_payload({"question": "Q?", "fields": fields})
    assert payload["mode"] == "free_text"
    assert str(MAX_FORM_SERIALIZED_BYTES) in payload["degraded_from_form"]


def test_garbage_arguments_never_raise() -> None:
    for args in (None, "text", 3, {"question": None, "options": [None, {"a": [1, None]}]}):
        payload = build_clarification_payload(args)
        assert payload["question"]
        json.dumps(payload)


async def test_pauses_through_the_assembled_fused_lead_chain(tmp_path: Any) -> None:
    """The real lead graph (fused chain, default config) interrupts at the question."""
    from graphs.lead_agent import build_lead_agent
    from runtime.config import load_settings
    from tests.support.scripted import write_config

    RAN.clear()
    settings = load_settings(
        write_config(
            tmp_path,
            [
                {"tool_calls": [{"name": "side_effect", "args": {"text": "early"}}, ASK]},
                {"content": "Exporting as CSV."},
            ],
            tools=[
                {"name": "side_effect", "use": f"{__name__}:side_effect"},
                {"name": "ask_clarification", "use": "tools.clarification:ask_clarification"},
            ],
        )
    )
    config: RunnableConfig = {"configurable": {"thread_id": "fused-1"}}
    graph = build_lead_agent(settings, config)
    graph.checkpointer = InMemorySaver()
    result = await graph.ainvoke({"messages": [HumanMessage("export it")]}, config)
    assert RAN == []
    (pending,) = result["__interrupt__"]
    assert pending.value[0]["human_input"]["version"] == 1
    resumed = await graph.ainvoke(Command(resume="CSV"), config)
    assert RAN == []  # the sibling was dropped, not deferred
    answer = next(m for m in resumed["messages"] if isinstance(m, ToolMessage))
    assert (
        answer.text == "CSV" and answer.additional_kwargs["human_input_response"]["text"] == "CSV"
    )
    assert resumed["messages"][-1].content == "Exporting as CSV."


async def test_interrupt_carries_both_shapes_and_resume_answers_the_call() -> None:
    """Issue 19: the interrupt value is Agent Chat UI's shape with the spec's payload."""
    RAN.clear()
    agent, model = _agent(
        [
            {"tool_calls": [{"name": "side_effect", "args": {"text": "early"}}, ASK]},
            {"content": "Using JSON."},
        ],
        mode="interrupt",
    )
    config = {"configurable": {"thread_id": "i1"}}
    first = await agent.ainvoke({"messages": [HumanMessage("export it")]}, config)
    (pending,) = first["__interrupt__"]
    (card,) = pending.value
    assert card["action_request"] == {
        "action": "ask_clarification",
        "args": {"question": "Which format?", "options": ["CSV", "csv", "JSON"]},
    }
    assert card["config"]["allow_respond"] is True and card["config"]["allow_accept"] is False
    assert "1. CSV" in card["description"]
    assert (
        card["human_input"]["version"] == 1 and card["human_input"]["mode"] == "choice_with_other"
    )
    state = await agent.aget_state(config)
    assert state.next == ("tools",) and state.tasks[0].interrupts
    # Agent Chat UI answers with a list of {"type": "response", "args": ...}.
    done = await agent.ainvoke(Command(resume=[{"type": "response", "args": "JSON"}]), config)
    assert RAN == []
    ai = next(m for m in done["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert [c["name"] for c in ai.tool_calls] == ["ask_clarification"], "sibling dropped"
    answer = next(m for m in done["messages"] if isinstance(m, ToolMessage))
    assert answer.text == "JSON"
    response = answer.additional_kwargs["human_input_response"]
    assert response == {
        "source": "ask_clarification",
        "version": 1,
        "response_kind": "option",
        "text": "JSON",
    }
    assert done["messages"][-1].content == "Using JSON."
    last = model.requests[-1]
    assert isinstance(last[-1], ToolMessage) and last[-1].text == "JSON"
    assert check_strict_request(last) == []


async def test_a_new_message_instead_of_a_resume_is_the_answer() -> None:
    agent, model = _agent([{"tool_calls": [ASK]}, {"content": "Got it."}], mode="interrupt")
    config = {"configurable": {"thread_id": "i2"}}
    await agent.ainvoke({"messages": [HumanMessage("export it")]}, config)
    done = await agent.ainvoke({"messages": [HumanMessage("CSV please")]}, config)
    assert done["messages"][-1].content == "Got it."
    kinds = [type(m).__name__ for m in done["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
    assert done["messages"][2].artifact["human_input"]["question"] == "Which format?"
    assert check_strict_request(model.requests[-1]) == []
    assert model.requests[-1][-1].text == "CSV please"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("  yes ", "yes"),
        ({"type": "response", "args": "a"}, "a"),
        ([{"type": "response", "args": "b"}], "b"),
        ({"answer": "c"}, "c"),
        ({"type": "ignore", "args": None}, None),
        ("", None),
        (None, None),
        (12, None),
        ([1, 2], None),
    ],
)
def test_resume_values_are_parsed_or_refused(value: Any, expected: str | None) -> None:
    from middlewares.clarification import parse_clarification_answer

    response = parse_clarification_answer(value, {"question": "q"})
    assert (response or {}).get("text") == expected


async def test_ignored_question_tells_the_model_nobody_answered() -> None:
    agent, _ = _agent([{"tool_calls": [ASK]}, {"content": "Assuming CSV."}], mode="interrupt")
    config = {"configurable": {"thread_id": "i3"}}
    await agent.ainvoke({"messages": [HumanMessage("export it")]}, config)
    done = await agent.ainvoke(Command(resume={"type": "ignore", "args": None}), config)
    answer = next(m for m in done["messages"] if isinstance(m, ToolMessage))
    assert "did not answer" in answer.text
    assert "human_input_response" not in answer.additional_kwargs
    assert done["messages"][-1].content == "Assuming CSV."


async def test_malformed_question_interrupts_in_interrupt_mode() -> None:
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [],
            "invalid_tool_calls": [
                {"name": "ask_clarification", "args": '{"question": "Which year?"', "id": "bad2"}
            ],
        },
        {"content": "2024 it is."},
    ]
    agent, _ = _agent(script, mode="interrupt")
    config = {"configurable": {"thread_id": "i4"}}
    first = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert first["__interrupt__"][0].value[0]["human_input"]["mode"] == "free_text"
    done = await agent.ainvoke(Command(resume="2024"), config)
    assert done["messages"][-1].content == "2024 it is."


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match=r"clarification\.mode"):
        ClarificationMiddleware(mode="pause")
