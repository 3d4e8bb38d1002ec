"""TitleMiddleware through real agent runs."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from middlewares.title import TitleMiddleware, fallback_title
from runtime.scripted_model import ScriptedChatModel
from runtime.state import ThreadState
from tests.support.tools import echo


def _agent(script: list[dict[str, Any]], middleware: TitleMiddleware) -> Any:
    model = ScriptedChatModel.model_validate({"script": script})
    return create_agent(
        model,
        [echo],
        middleware=[middleware],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )


SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "echo", "args": {"text": "x"}}]},
    {"content": "Here it is."},
]


async def test_title_from_model_after_first_full_exchange() -> None:
    titler = ScriptedChatModel.model_validate(
        {"script": [{"content": ' "Quarterly sales report" '}]}
    )
    agent = _agent(SCRIPT, TitleMiddleware(model=titler))
    config = {"configurable": {"thread_id": "t1"}}
    seen: list[Any] = []
    async for mode, chunk in agent.astream(
        {"messages": [HumanMessage("Make me the Q3 sales report")]},
        config,
        stream_mode=["messages", "values"],
    ):
        if mode == "messages":
            seen.append(chunk[0].content)
        else:
            final = chunk
    assert final["title"] == "Quarterly sales report"
    # The title model's tokens never reach the message stream.
    assert not any("Quarterly" in str(c) for c in seen)


async def test_title_is_written_once() -> None:
    titler = ScriptedChatModel.model_validate({"script": [{"content": "First title"}]})
    agent = _agent([*SCRIPT, {"content": "again"}], TitleMiddleware(model=titler))
    config = {"configurable": {"thread_id": "t2"}}
    await agent.ainvoke({"messages": [HumanMessage("one")]}, config)
    second = await agent.ainvoke({"messages": [HumanMessage("two")]}, config)
    assert second["title"] == "First title"


async def test_fallback_without_model_and_on_model_failure() -> None:
    agent = _agent(SCRIPT, TitleMiddleware(max_chars=20))
    result = await agent.ainvoke(
        {"messages": [HumanMessage("Please   analyse the\nattached logs")]},
        {"configurable": {"thread_id": "t3"}},
    )
    assert result["title"] == "Please analyse the"

    broken = ScriptedChatModel.model_validate(
        {"script": [{"error": {"kind": "status", "status": 500, "message": "boom"}}]}
    )
    agent = _agent(SCRIPT, TitleMiddleware(model=broken))
    result = await agent.ainvoke(
        {"messages": [HumanMessage("Summarise my notes")]}, {"configurable": {"thread_id": "t4"}}
    )
    assert result["title"] == "Summarise my notes"


async def test_no_title_while_tool_calls_pending_or_question_missing() -> None:
    agent = _agent([SCRIPT[0]], TitleMiddleware())
    result = await agent.ainvoke(
        {"messages": [HumanMessage([{"type": "image", "url": "http://x"}])]},  # type: ignore[list-item]
        {"configurable": {"thread_id": "t5"}},
    )
    assert result.get("title") is None


def test_fallback_title_edges() -> None:
    assert fallback_title("", 30) == "New conversation"
    assert fallback_title("a" * 100, 10) == "a" * 9 + "…"
    assert fallback_title("word " * 30, 16).endswith("…")
    assert len(fallback_title("word " * 30, 16)) <= 16


async def test_title_uses_the_users_own_text_not_the_uploads_block() -> None:
    """Issue 19.3: the first message carries uploads; the title is the user's text."""
    agent = _agent([{"content": "Done."}], TitleMiddleware())
    message = HumanMessage(
        "<uploaded_files>\n- a.csv (1 KB) at /mnt/user-data/uploads/a.csv\n</uploaded_files>"
        "\n\nSummarize the sales numbers",
        additional_kwargs={"original_user_content": "Summarize the sales numbers"},
    )
    result = await agent.ainvoke({"messages": [message]}, {"configurable": {"thread_id": "u"}})
    assert result["title"] == "Summarize the sales numbers"


async def test_title_input_is_redacted_when_pii_redaction_is_on() -> None:
    """Issue 19.3 / spec 4: the assembled chain passes title input through redact_text."""
    from runtime.config import Settings
    from tests.support.agents import chain_for

    settings = Settings.model_validate({"pii_redaction": {"enabled": True}})
    titles = [m for m in chain_for(settings) if isinstance(m, TitleMiddleware)]
    assert len(titles) == 1 and titles[0].redactor is not None
    agent = _agent([{"content": "Noted."}], titles[0])
    result = await agent.ainvoke(
        {"messages": [HumanMessage("mail alice@example.com the report")]},
        {"configurable": {"thread_id": "p"}},
    )
    assert "alice@example.com" not in result["title"]
    assert result["title"].startswith("mail [")
