"""File tools in real lead-agent runs: the happy path, every user error, and state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from runtime.scripted_model import ScriptedChatModel
from runtime.state import ThreadState
from sandbox.local import LocalSandboxProvider
from sandbox.provider import get_sandbox_provider
from tests.support.sandbox_runs import make_settings, run_agent, tool_messages
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tools.files import read_file, write_file

WS = "/mnt/user-data/workspace"


def call(name: str, **args: Any) -> dict[str, Any]:
    if name not in {"present_files", "view_image"}:
        args.setdefault("description", f"{name} for the test")
    return tool_call(name, **args)


async def test_write_read_edit_list_glob_grep(tmp_path: Path) -> None:
    """Every edit of an existing file follows a read of its newest content (ReadBeforeWrite)."""
    app = "src/app.py"
    script = [
        ai_tools(call("write_file", path=app, content="x = 1\ny = 1\nprint(x)\n")),
        ai_tools(call("read_file", path=f"{WS}/{app}", start_line=2, end_line=3)),
        ai_tools(call("str_replace", path=app, old_str="x = 1", new_str="x = 2")),
        ai_tools(call("str_replace", path=app, old_str="= 1", new_str="= 3")),
        ai_tools(call("read_file", path=app)),
        ai_tools(call("str_replace", path=app, old_str="= 1", new_str="= 3")),
        ai_tools(call("read_file", path=app)),
        ai_tools(call("str_replace", path=app, old_str="nothing", new_str="x")),
        ai_tools(call("str_replace", path=app, old_str="print", new_str="log", replace_all=True)),
        ai_tools(call("read_file", path=app)),
        ai_tools(call("write_file", path=app, content="# tail\n", append=True)),
        ai_tools(call("read_file", path=app)),
        ai_tools(call("ls", path=WS)),
        ai_tools(call("glob", pattern="**/*.py")),
        ai_tools(call("grep", pattern="LOG\\(", path=WS, glob="*.py")),
        ai_tools(call("grep", pattern="y = ", path=WS, literal=True, case_sensitive=True)),
        ai_text("Edited."),
    ]
    result = await run_agent(make_settings(tmp_path, script), "edit my app")
    messages = tool_messages(result)
    contents = [m.content for m in messages]
    statuses = [m.status for m in messages]
    replaced = f"Replaced 1 occurrence in {app}."
    assert contents[0] == f"Wrote 21 bytes to {app}."
    assert contents[1] == "y = 1\nprint(x)\n"
    assert contents[2] == replaced
    assert statuses[3] == "error", "the file changed since it was read"
    assert messages[3].additional_kwargs["deerflow_write_block"]["tool"] == "str_replace"
    assert contents[4] == "x = 2\ny = 1\nprint(x)\n"
    assert contents[5] == replaced
    assert statuses[7] == "error" and "old_str was not found" in str(contents[7])
    assert statuses[8] == "success" and contents[8] == replaced, "a failed edit changed nothing"
    assert contents[10] == f"Appended 7 bytes to {app}."
    assert contents[11] == "x = 2\ny = 3\nlog(x)\n# tail\n"
    assert contents[12] == f"{WS}/src/\n{WS}/{app}"
    assert contents[13] == f"{WS}/{app}"
    assert contents[14] == f"{WS}/{app}:3: log(x)"
    assert contents[15] == f"{WS}/{app}:2: y = 3"
    assert result["messages"][-1].content == "Edited."


async def test_read_before_write_with_the_real_tools(tmp_path: Path) -> None:
    """Spec 13 in the assembled chain: blocked unread write, read-then-write, stale read."""
    script = [
        ai_tools(call("write_file", path="notes.md", content="v1\n")),
        ai_tools(call("write_file", path="notes.md", content="blind overwrite\n")),
        ai_tools(call("read_file", path="notes.md")),
        ai_tools(call("bash", command="echo v2 > notes.md")),
        ai_tools(call("write_file", path="notes.md", content="stale overwrite\n")),
        ai_tools(call("read_file", path="notes.md")),
        ai_tools(call("write_file", path="notes.md", content="informed overwrite\n")),
        ai_tools(call("read_file", path="notes.md")),
        ai_text("done"),
    ]
    result = await run_agent(make_settings(tmp_path, script), "go")
    messages = tool_messages(result)
    blind, stale = messages[1], messages[4]
    for blocked in (blind, stale):
        assert blocked.status == "error"
        assert blocked.additional_kwargs["deerflow_write_block"] == {
            "path": f"{WS}/notes.md",
            "tool": "write_file",
        }
    assert messages[2].content == "v1\n", "the blind overwrite wrote nothing"
    assert messages[5].content == "v2\n", "the stale overwrite wrote nothing"
    assert messages[6].status == "success"
    assert messages[7].content == "informed overwrite\n"


async def test_user_errors_become_error_tool_messages(tmp_path: Path) -> None:
    script = [
        ai_tools(call("read_file", path="../../etc/passwd")),
        ai_tools(call("read_file", path="/etc/passwd")),
        ai_tools(call("write_file", path="/mnt/skills/x.md", content="x")),
        ai_tools(call("read_file", path="missing.txt")),
        ai_tools(call("grep", pattern="([bad", path=WS)),
        ai_tools(call("glob", pattern="../*")),
        ai_tools(call("write_file", path="twice.txt", content="a a")),
        ai_tools(call("read_file", path="twice.txt")),
        ai_tools(call("str_replace", path="twice.txt", old_str="a", new_str="b")),
        ai_tools(call("str_replace", path="twice.txt", old_str="", new_str="b")),
        ai_tools(tool_call("read_file", description="no path given")),
        ai_tools(call("read_file", path="twice.txt", start_line=0)),
        ai_text("Recovered from every error."),
    ]
    result = await run_agent(make_settings(tmp_path, script), "break things")
    messages = tool_messages(result)
    expected = [
        "'..' is not allowed",
        "is outside the sandbox",
        "is read-only",
        "no such file",
        "invalid regular expression",
        "must be relative",
        None,
        None,
        "occurs 2 times",
        "old_str is empty",
        "path",
        "start_line must be >= 1",
    ]
    assert len(messages) == len(expected)
    for message, fragment in zip(messages, expected, strict=True):
        if fragment is None:
            assert message.status == "success"
            continue
        assert message.status == "error", message.content
        assert fragment in str(message.content), message.content
    assert result["messages"][-1].content == "Recovered from every error."


async def test_binary_and_non_utf8_files(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        [
            ai_tools(
                call("bash", command="printf 'a\\000b' > bin.dat; printf 'caf\\351\\n' > l1.txt")
            ),
            ai_tools(call("read_file", path="bin.dat")),
            ai_tools(call("read_file", path="l1.txt")),
            ai_tools(call("str_replace", path="l1.txt", old_str="caf", new_str="tea")),
            ai_text("done"),
        ],
    )
    messages = tool_messages(await run_agent(settings, "go"))
    assert messages[1].status == "error" and "binary" in str(messages[1].content)
    assert messages[2].status == "success" and messages[2].content == "caf\ufffd\n"
    assert messages[3].status == "error" and "not valid UTF-8" in str(messages[3].content)


async def test_parallel_first_tool_calls_share_one_sandbox(tmp_path: Path) -> None:
    script = [
        ai_tools(
            call("write_file", path="a.txt", content="a"),
            call("write_file", path="b.txt", content="b"),
            call("ls", path=WS),
        ),
        ai_text("done"),
    ]
    settings = make_settings(tmp_path, script)
    result = await run_agent(settings, "go", thread_id="parallel", user="alice")
    assert [m.status for m in tool_messages(result)] == ["success"] * 3
    provider = get_sandbox_provider(settings)
    assert isinstance(provider, LocalSandboxProvider)
    assert result["sandbox"] == {"sandbox_id": provider.sandbox_id_for("alice", "parallel")}
    workspace = settings.data_root_path() / "users/alice/threads/parallel/user-data/workspace"
    assert sorted(p.name for p in workspace.iterdir()) == ["a.txt", "b.txt"]


@pytest.mark.parametrize(
    "forged", ["bob", "junk", 7, {"sandbox_id": 7}, {"sandbox_id": ""}, {"other": "x"}]
)
async def test_a_forged_or_malformed_sandbox_in_state_is_not_used(
    tmp_path: Path, forged: Any
) -> None:
    settings = make_settings(
        tmp_path, [ai_tools(call("write_file", path="mine.txt", content="alice")), ai_text("ok")]
    )
    provider = get_sandbox_provider(settings)
    assert isinstance(provider, LocalSandboxProvider)
    bobs = await provider.acquire("bobs-thread", user_id="bob")
    value = {"sandbox_id": bobs} if forged == "bob" else forged
    result = await run_agent(
        settings,
        {"messages": [HumanMessage("go")], "sandbox": value},
        thread_id="alices-thread",
        user="alice",
    )
    alices = provider.sandbox_id_for("alice", "alices-thread")
    assert result["sandbox"] == {"sandbox_id": alices}
    assert tool_messages(result)[0].status == "success"
    users = settings.data_root_path() / "users"
    assert (users / "alice/threads/alices-thread/user-data/workspace/mine.txt").exists()
    assert not (users / "bob/threads/bobs-thread/user-data/workspace/mine.txt").exists()


async def test_tools_persist_the_sandbox_themselves_without_the_middleware(
    tmp_path: Path, use_config: Any
) -> None:
    use_config(write_config(tmp_path, [ai_text("unused")]))
    model = ScriptedChatModel.model_validate(
        {
            "script": [
                ai_tools(call("write_file", path="solo.txt", content="solo")),
                ai_tools(call("read_file", path="solo.txt")),
                ai_text("done"),
            ]
        }
    )
    graph = create_agent(
        model, [write_file, read_file], state_schema=ThreadState, checkpointer=InMemorySaver()
    )
    config: RunnableConfig = {"configurable": {"thread_id": "no-middleware"}}
    result = await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert [m.content for m in tool_messages(result)] == ["Wrote 4 bytes to solo.txt.", "solo"]
    assert result["sandbox"]["sandbox_id"].startswith("local-")
