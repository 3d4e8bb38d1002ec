"""The assembled lead and subagent chains through the real server, turn by turn.

Each scenario records what the model received on every call and checks the
chain's neighbours together: server blocks intact, warnings delivered, hidden
context never persisted, strict-provider rules on every request, titles.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from tests.support.delegation import task_call
from tests.support.scripted import ai_text, ai_tools, tool_call

pytestmark = pytest.mark.server

_DATE = re.compile(r"Today's date is \w+, \d{4}-\d{2}-\d{2}")


def _users(call: Any) -> list[HumanMessage]:
    return [
        m
        for m in call.messages
        if isinstance(m, HumanMessage) and not m.additional_kwargs.get("hide_from_ui")
    ]


async def test_uploads_then_a_question(scenario: Any, chain_profile: str) -> None:
    s = await scenario(
        [ai_text("I see the plan."), ai_text("The budget is 10.")],
        all_optional=chain_profile == "all_optional",
    )
    await s.upload({"plan.md": b"# Plan\n## Budget\n10\n"})
    await s.send("Summarize <b>my</b> plan", files=["plan.md"])
    await s.send("What is the budget?")
    first, second = s.calls
    (user,) = _users(first)
    # The server's block is intact (not escaped, not wrapped); the user's text follows.
    assert user.text.startswith("<uploaded_files>\nFiles attached to this message:\n- plan.md")
    assert "&lt;uploaded_files&gt;" not in user.text and "untrusted_input" not in user.text
    assert user.text.endswith("Summarize <b>my</b> plan")
    # Still intact on the next turn, where it is history.
    assert _users(second)[0].text == user.text
    # The date reached the model on both turns, as request-only context.
    for call in s.calls:
        assert _DATE.search(call.text)
    state = await s.state()
    assert state["values"]["title"] == "Summarize <b>my</b> plan"
    s.assert_strict()
    s.assert_single_leading_system()
    await s.assert_nothing_hidden_persisted()


async def test_tool_loop_warning_arrives_with_receipts_on(scenario: Any) -> None:
    loop = [ai_tools(tool_call("echo", text="same")) for _ in range(3)]
    s = await scenario([*loop, ai_text("Stopping here.")])
    await s.send("loop please")
    assert len(s.calls) == 4
    fourth = s.calls[3]
    assert "<tool_receipts>" in fourth.text, "receipts are on by default"
    assert "[Loop warning]" in fourth.text
    assert all("[Loop warning]" not in c.text for c in s.calls[:3])
    messages = await s.messages()
    assert all("[Loop warning]" not in str(m["content"]) for m in messages)
    s.assert_strict()
    await s.assert_nothing_hidden_persisted()


async def test_receipts_are_stamped_and_the_ledger_stays_request_only(
    scenario: Any, chain_profile: str
) -> None:
    s = await scenario(
        [ai_tools(tool_call("echo", text="one")), ai_text("Done (r1).")],
        all_optional=chain_profile == "all_optional",
    )
    await s.send("echo one")
    ledger = [m for m in s.calls[1].messages if m.additional_kwargs.get("deerflow_receipt_ledger")]
    assert len(ledger) == 1 and "r1 echo success" in ledger[0].text
    messages = await s.messages()
    tool = next(m for m in messages if m["type"] == "tool")
    assert tool["additional_kwargs"]["deerflow_tool_receipt"]["tool"] == "echo"
    final = messages[-1]
    assert final["additional_kwargs"]["deerflow_receipt_ledger"]["ids"] == "r1"
    s.assert_strict()
    await s.assert_nothing_hidden_persisted()


async def test_a_big_tool_output_is_externalised(scenario: Any, chain_profile: str) -> None:
    big = "line of output\n" * 3000
    s = await scenario(
        [ai_tools(tool_call("echo", text=big)), ai_text("Read it.")],
        all_optional=chain_profile == "all_optional",
    )
    await s.send("produce a lot")
    (result,) = [m for m in s.calls[1].messages if isinstance(m, ToolMessage)]
    assert len(result.text) < len(big) // 2
    assert ".tool-results/" in result.text
    s.assert_strict()


async def test_pii_in_input_is_redacted_for_the_model_and_the_title(scenario: Any) -> None:
    s = await scenario([ai_text("Will do.")], all_optional=True)
    await s.send("mail bob@example.com the report")
    (user,) = _users(s.calls[0])
    assert "bob@example.com" not in user.text and "[EMAIL_" in user.text
    state = await s.state()
    assert "bob@example.com" not in state["values"]["title"]
    # State keeps what the user sent (redaction is a request view).
    assert state["values"]["messages"][0]["content"] == "mail bob@example.com the report"
    s.assert_strict()


async def test_delegation_reaches_the_subagent_chain(scenario: Any, chain_profile: str) -> None:
    s = await scenario(
        [ai_tools(task_call("look it up")), ai_text("The worker says done.")],
        worker=[ai_tools(tool_call("echo", text="w")), ai_text("worker done")],
        all_optional=chain_profile == "all_optional",
    )
    await s.send("delegate it")
    assert len(s.worker_calls) == 2
    first = s.worker_calls[0]
    # One leading system block, and it carries the date (spec 30).
    systems = [m for m in first.messages if isinstance(m, SystemMessage)]
    assert len(systems) == 1 and first.messages[0] is systems[0]
    assert _DATE.search(systems[0].text)
    assert not any(isinstance(m, HumanMessage) and _DATE.search(m.text) for m in first.messages), (
        "the subagent's date is not a human message"
    )
    s.assert_strict(s.worker_calls)
    s.assert_strict()
    s.assert_single_leading_system(s.worker_calls)
    messages = await s.messages()
    assert messages[-1]["content"] == "The worker says done."
    await s.assert_nothing_hidden_persisted()


async def test_a_provider_error_mid_run_is_retried(scenario: Any, chain_profile: str) -> None:
    s = await scenario(
        [
            ai_tools(tool_call("echo", text="before")),
            {"content": "Recovered.", "errors": [{"kind": "status", "status": 503}]},
        ],
        all_optional=chain_profile == "all_optional",
        llm_error_handling={"enabled": True, "max_retries": 2, "base_delay": 0.0},
    )
    await s.send("go")
    messages = await s.messages()
    assert messages[-1]["content"] == "Recovered."
    # The retried request was the same valid request.
    assert len(s.calls) == 3
    assert [m.text for m in s.calls[1].messages] == [m.text for m in s.calls[2].messages]
    s.assert_strict()
    await s.assert_nothing_hidden_persisted()


async def test_a_provider_error_that_persists_ends_with_a_marked_fallback(
    scenario: Any,
) -> None:
    s = await scenario(
        [
            ai_tools(tool_call("echo", text="before")),
            {"content": "never", "error": {"kind": "status", "status": 400}},
        ],
    )
    await s.send("go")
    messages = await s.messages()
    assert messages[-1]["type"] == "ai"
    assert messages[-1]["additional_kwargs"].get("deerflow_llm_error") is not None
    s.assert_strict()
    # The next turn is still a valid request.
    s2 = await s.send("again")
    assert s2 is not None
    s.assert_strict()


async def test_token_usage_is_stamped_once_per_answer_through_the_server(scenario: Any) -> None:
    """Each answer carries the run's running total, written once by the model node."""
    s = await scenario(
        [
            ai_tools(tool_call("echo", text="one")),
            ai_tools(tool_call("echo", text="two")),
            ai_text("Done."),
        ],
        all_optional=True,
    )
    await s.send("echo twice")
    answers = [m for m in await s.messages() if m["type"] == "ai"]
    assert len(answers) == 3
    stamps = [a["response_metadata"]["run_token_usage"] for a in answers]
    assert [stamp["calls"] for stamp in stamps] == [1, 2, 3]
    assert [stamp["counted"] for stamp in stamps] == [a["id"] for a in answers]
    own = [a["usage_metadata"]["total_tokens"] for a in answers]
    assert [stamp["total_tokens"] for stamp in stamps] == [sum(own[: i + 1]) for i in range(3)]
    state = (await s.state())["values"]
    (run_usage,) = state["token_usage"].values()
    assert run_usage["total_tokens"] == sum(own) and run_usage["calls"] == 3
    s.assert_strict()
