"""SandboxMiddleware in real runs: lazy and eager acquisition, persistence, release, failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from graphs.lead_agent import build_lead_agent
from middlewares.chain import (
    ChainInputs,
    build_lead_runtime_middlewares,
    build_middlewares,
    build_subagent_runtime_middlewares,
)
from middlewares.dangling_tool_call import DanglingToolCallMiddleware
from middlewares.sandbox import SandboxMiddleware, _with_sandbox_id
from middlewares.thread_data import ThreadDataMiddleware
from middlewares.tool_result_sanitization import ToolResultSanitizationMiddleware
from middlewares.uploads import UploadsMiddleware
from runtime.config import ModelConfig, Settings
from runtime.run_options import RunOptions
from sandbox.provider import get_sandbox_provider
from tests.support.sandbox_providers import CountingLocalProvider
from tests.support.sandbox_runs import make_settings, run_agent, run_config, tool_messages
from tests.support.scripted import ai_text, ai_tools, tool_call

COUNTING = {"use": "tests.support.sandbox_providers:CountingLocalProvider"}


def ls() -> dict[str, object]:
    return tool_call("ls", description="look", path="/mnt/user-data")


def test_chain_positions() -> None:
    """Spec numbers 5, 6 and 7, in that order; subagents skip Uploads (lead only)."""
    model = ModelConfig(name="m", use="runtime.scripted_model:ScriptedChatModel")
    inputs = ChainInputs(settings=Settings(), options=RunOptions(), model=model)
    lead = [type(m) for m in build_lead_runtime_middlewares(inputs)]
    at = lead.index(ThreadDataMiddleware)
    assert lead[at : at + 3] == [ThreadDataMiddleware, UploadsMiddleware, SandboxMiddleware]
    assert (
        lead.index(ToolResultSanitizationMiddleware) < at < lead.index(DanglingToolCallMiddleware)
    )
    full = [type(m) for m in build_middlewares(inputs)]
    assert full[at : at + 3] == lead[at : at + 3]
    sub = [type(m) for m in build_subagent_runtime_middlewares(inputs)]
    assert UploadsMiddleware not in sub
    sub_at = sub.index(ThreadDataMiddleware)
    assert sub[sub_at : sub_at + 2] == [ThreadDataMiddleware, SandboxMiddleware]


async def test_lazy_acquisition_only_when_a_sandbox_tool_runs(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_text("no tools needed")], sandbox=COUNTING)
    provider = get_sandbox_provider(settings)
    assert isinstance(provider, CountingLocalProvider)
    result = await run_agent(settings, "hi")
    assert provider.acquired == 0 and provider.released == []
    assert "sandbox" not in result or result["sandbox"] is None


async def test_first_tool_acquires_persists_and_run_end_releases(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        [ai_tools(ls()), ai_tools(ls()), ai_text("done"), ai_tools(ls()), ai_text("again")],
        sandbox=COUNTING,
    )
    provider = get_sandbox_provider(settings)
    assert isinstance(provider, CountingLocalProvider)
    saver = InMemorySaver()
    first = await run_agent(settings, "hi", checkpointer=saver, thread_id="t-life", user="dana")
    sandbox_id = provider.sandbox_id_for("dana", "t-life")
    assert first["sandbox"] == {"sandbox_id": sandbox_id}
    assert provider.acquired == 1, "the second call reuses the id persisted in state"
    assert provider.released == [sandbox_id]
    # A new process would have forgotten the sandbox: state's id is re-acquired.
    await provider.reset()
    second = await run_agent(settings, "more", checkpointer=saver, thread_id="t-life", user="dana")
    assert second["sandbox"] == {"sandbox_id": sandbox_id}
    assert provider.acquired == 2
    assert provider.released == [sandbox_id, sandbox_id]


async def test_eager_acquisition(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_text("hi")], sandbox={**COUNTING, "lazy_init": False})
    provider = get_sandbox_provider(settings)
    assert isinstance(provider, CountingLocalProvider)
    result = await run_agent(settings, "hi", thread_id="t-eager", user="erin")
    assert result["sandbox"] == {"sandbox_id": provider.sandbox_id_for("erin", "t-eager")}
    assert provider.acquired == 1


async def test_unavailable_sandbox_becomes_an_error_tool_message(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        [ai_tools(ls()), ai_text("I could not use the sandbox.")],
        sandbox={"use": "tests.support.sandbox_providers:UnavailableProvider", "lazy_init": False},
    )
    result = await run_agent(settings, "hi")
    (message,) = tool_messages(result)
    assert message.status == "error"
    assert message.content == (
        "Error: the sandbox is unavailable: no sandbox capacity left (test provider)"
    )
    assert result["messages"][-1].content == "I could not use the sandbox."
    # Issue 19.6: the short-circuit is stamped like every other result, and receipted.
    meta = message.additional_kwargs["deerflow_tool_meta"]
    assert meta["status"] == "error" and meta["error_type"] == "transient"
    assert meta["source"] == "sandbox"
    receipt = message.additional_kwargs["deerflow_tool_receipt"]
    assert receipt["tool"] == "ls" and receipt["status"] == "error"
    assert receipt["tool_call_id"] == message.tool_call_id


def test_sync_execution_refuses_sandbox_tools_cleanly(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_tools(ls()), ai_text("done")])
    graph = build_lead_agent(settings, run_config("t-sync", "alice"))
    graph.checkpointer = InMemorySaver()
    result = graph.invoke({"messages": [HumanMessage("hi")]}, run_config("t-sync", "alice"))
    (message,) = tool_messages(result)
    assert message.status == "error" and "asynchronously" in str(message.content)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            ToolMessage("ok", tool_call_id="c1"),
            {"sandbox": {"sandbox_id": "s1"}, "messages": [ToolMessage("ok", tool_call_id="c1")]},
        ),
        (Command(update=None), {"sandbox": {"sandbox_id": "s1"}}),
        (
            Command(update={"artifacts": ["/a"], "sandbox": {"sandbox_id": "tool-set"}}),
            {"sandbox": {"sandbox_id": "tool-set"}, "artifacts": ["/a"]},
        ),
    ],
)
def test_with_sandbox_id(result: ToolMessage | Command[object], expected: object) -> None:
    merged = _with_sandbox_id(result, "s1")
    assert isinstance(merged, Command)
    assert merged.update == expected


def test_with_sandbox_id_leaves_unknown_shapes_alone() -> None:
    odd: Command[object] = Command(update=[("messages", [])])
    assert _with_sandbox_id(odd, "s1") is odd
