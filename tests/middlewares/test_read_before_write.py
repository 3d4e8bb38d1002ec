"""ReadBeforeWriteMiddleware (spec 13) through real ``create_agent`` runs."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest

from middlewares._tool_meta import TOOL_META_KEY
from middlewares.read_before_write import (
    READ_MARK_KEY,
    WRITE_BLOCK_KEY,
    HostPathContentProbe,
    ProbeTarget,
    ReadBeforeWriteMiddleware,
    elide_blocked_write_payloads,
)
from runtime.config import ReadBeforeWriteConfig, get_settings
from runtime.paths import thread_paths
from tests.support import guard_tools
from tests.support.guard_agents import RecordingMiddleware, make_agent, run_config, tool_messages
from tests.support.scripted import ai_text, ai_tools, tool_call

TOOLS: list[BaseTool] = [
    guard_tools.bash,
    guard_tools.read_file,
    guard_tools.write_file,
    guard_tools.str_replace,
]
NOTES = "/mnt/user-data/workspace/notes.md"


def _thread() -> str:
    return f"rbw-{uuid.uuid4().hex}"


def _host(thread: str, name: str = "notes.md") -> Path:
    workspace = thread_paths(get_settings().data_root_path(), "default", thread).workspace
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace / name


async def _seed(thread: str, text: str, name: str = "notes.md") -> None:
    """Create a file in the thread's workspace, off the event loop."""
    await asyncio.to_thread(lambda: _host(thread, name).write_text(text, encoding="utf-8"))


async def _content(thread: str, name: str = "notes.md") -> str:
    return await asyncio.to_thread(lambda: _host(thread, name).read_text(encoding="utf-8"))


def _middleware(**config: Any) -> ReadBeforeWriteMiddleware:
    return ReadBeforeWriteMiddleware(
        probe=HostPathContentProbe(get_settings().data_root_path()),
        config=ReadBeforeWriteConfig(**config),
    )


def _read(path: str = NOTES) -> dict[str, Any]:
    return tool_call("read_file", description="look", path=path)


def _write(content: str, path: str = NOTES, **extra: Any) -> dict[str, Any]:
    return tool_call("write_file", description="save", path=path, content=content, **extra)


def _replace(old: str, new: str, path: str = NOTES) -> dict[str, Any]:
    return tool_call("str_replace", description="edit", path=path, old_str=old, new_str=new)


def _bash(command: str) -> dict[str, Any]:
    return tool_call("bash", description="shell", command=command)


async def _run(
    script: list[dict[str, Any]],
    thread: str,
    *,
    tools: list[BaseTool] | None = None,
    middleware: list[Any] | None = None,
) -> dict[str, Any]:
    agent = make_agent(
        [*script, ai_text("done")],
        tools=tools or TOOLS,
        middleware=middleware or [_middleware()],
    )
    return await agent.ainvoke({"messages": [("user", "go")]}, run_config(thread))


def _is_blocked(message: ToolMessage, tool: str = "write_file") -> bool:
    return (
        message.status == "error"
        and message.additional_kwargs.get(WRITE_BLOCK_KEY) == {"path": NOTES, "tool": tool}
        and message.additional_kwargs[TOOL_META_KEY]["status"] == "error"
    )


# -- the acceptance path ---------------------------------------------------------


async def test_write_without_read_is_blocked_then_allowed_after_read() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    state = await _run(
        [ai_tools(_write("v2\n")), ai_tools(_read()), ai_tools(_write("v2\n"))], thread
    )
    blocked, read, written = tool_messages(state)
    assert _is_blocked(blocked)
    assert "you have not read it" in str(blocked.content)
    assert blocked.additional_kwargs[TOOL_META_KEY] == {
        "status": "error",
        "error_type": "read_required",
        "recoverable_by_model": True,
        "recommended_next_action": (
            "Call read_file on the file to see its current content, then retry the write."
        ),
        "source": "read_before_write",
    }
    assert read.content == "v1\n"
    mark = read.additional_kwargs[READ_MARK_KEY]
    assert mark == {
        "path": NOTES,
        "hash": hashlib.sha256(b"v1\n").hexdigest(),
        "tool_call_id": read.tool_call_id,
    }
    assert written.status == "success" and str(written.content).startswith("OK")
    assert await _content(thread) == "v2\n"


async def test_a_read_of_an_older_version_does_not_authorise_the_write() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    state = await _run(
        [
            ai_tools(_read()),
            ai_tools(_bash("echo changed-behind-your-back >> notes.md")),
            ai_tools(_write("mine\n")),
        ],
        thread,
    )
    _, _, blocked = tool_messages(state)
    assert _is_blocked(blocked)
    assert "changed after your last read_file" in str(blocked.content)
    assert await _content(thread) == "v1\nchanged-behind-your-back\n"


async def test_writes_never_refresh_a_mark() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    state = await _run(
        [ai_tools(_read()), ai_tools(_write("v2\n")), ai_tools(_write("v3\n"))], thread
    )
    _, first, second = tool_messages(state)
    assert first.status == "success"
    assert _is_blocked(second)
    assert await _content(thread) == "v2\n"


async def test_append_and_str_replace_are_gated_too() -> None:
    thread = _thread()
    await _seed(thread, "alpha beta\n")
    state = await _run(
        [
            ai_tools(_write("more\n", append=True)),
            ai_tools(_replace("beta", "gamma")),
            ai_tools(_read()),
            ai_tools(_replace("beta", "gamma")),
        ],
        thread,
    )
    appended, replaced, _, ok = tool_messages(state)
    assert _is_blocked(appended)
    assert _is_blocked(replaced, tool="str_replace")
    assert ok.status == "success"
    assert await _content(thread) == "alpha gamma\n"


async def test_new_files_need_no_read() -> None:
    thread = _thread()
    state = await _run([ai_tools(_write("fresh\n", path="reports/new.md"))], thread)
    (written,) = tool_messages(state)
    assert written.status == "success"
    assert await _content(thread, "reports/new.md") == "fresh\n"


async def test_relative_and_absolute_paths_share_one_mark() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    state = await _run(
        [ai_tools(_read("notes.md")), ai_tools(_write("v2\n", path="./sub/../notes.md"))],
        thread,
    )
    read, written = tool_messages(state)
    assert read.additional_kwargs[READ_MARK_KEY]["path"] == NOTES
    assert written.status == "success"


async def test_partial_read_of_the_newest_version_authorises() -> None:
    thread = _thread()
    await _seed(thread, "a\nb\nc\n")
    state = await _run(
        [
            ai_tools(tool_call("read_file", description="tail", path=NOTES, start_line=3)),
            ai_tools(_write("c2\n", append=True)),
        ],
        thread,
    )
    read, written = tool_messages(state)
    assert read.content == "c\n"
    assert written.status == "success"


async def test_failed_reads_leave_no_mark() -> None:
    thread = _thread()
    state = await _run([ai_tools(_read("missing.md")), ai_tools(_read("/etc/passwd"))], thread)
    missing, outside = tool_messages(state)
    assert str(missing.content).startswith("Error:")
    assert READ_MARK_KEY not in missing.additional_kwargs
    assert READ_MARK_KEY not in outside.additional_kwargs


def test_sync_run_uses_the_same_gate() -> None:
    thread = _thread()
    _host(thread).write_text("v1\n", encoding="utf-8")
    agent = make_agent(
        [ai_tools(_write("x")), ai_tools(_read()), ai_tools(_write("v2\n")), ai_text("done")],
        tools=TOOLS,
        middleware=[_middleware()],
    )
    state = agent.invoke({"messages": [("user", "go")]}, run_config(thread))
    blocked, read, written = tool_messages(state)
    assert _is_blocked(blocked)
    assert READ_MARK_KEY in read.additional_kwargs
    assert written.status == "success"
    assert _host(thread).read_text(encoding="utf-8") == "v2\n"


async def test_two_writes_in_one_turn_cannot_share_one_mark() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    state = await _run(
        [ai_tools(_read()), ai_tools(_write("left\n"), _write("right\n"))],
        thread,
    )
    _, first, second = tool_messages(state)
    outcomes = sorted([first.status, second.status])
    assert outcomes == ["error", "success"]
    loser = first if first.status == "error" else second
    assert _is_blocked(loser)
    winner_content = "left\n" if loser is second else "right\n"
    assert await _content(thread) == winner_content


class _SlowProbe(HostPathContentProbe):
    """Widens the race window between check and write (the gate must close it)."""

    def digest(self, target: ProbeTarget) -> str:
        value = super().digest(target)
        time.sleep(0.05)
        return value


def test_concurrent_sync_writes_from_threads_are_serialized() -> None:
    """Sync hooks run in worker threads; the gate serializes check and write across them."""
    thread = _thread()
    host = _host(thread)
    host.write_text("v1\n", encoding="utf-8")
    middleware = ReadBeforeWriteMiddleware(probe=_SlowProbe(get_settings().data_root_path()))
    read_call = {"name": "read_file", "args": {"path": NOTES}, "id": "r1"}
    runtime = SimpleNamespace(config=run_config(thread), context=None, server_info=None)

    def request(call: dict[str, Any], messages: list[Any]) -> ToolCallRequest:
        return ToolCallRequest(
            tool_call=call,  # type: ignore[arg-type]
            tool=None,
            state={"messages": messages},
            runtime=runtime,  # type: ignore[arg-type]
        )

    marked = middleware.wrap_tool_call(
        request(read_call, []), lambda _: ToolMessage("v1\n", tool_call_id="r1")
    )
    assert isinstance(marked, ToolMessage) and READ_MARK_KEY in marked.additional_kwargs
    history = [AIMessage("", tool_calls=[read_call]), marked]
    barrier = threading.Barrier(3)

    def write(index: int) -> str:
        call = {
            "name": "write_file",
            "args": {"path": NOTES, "content": f"w{index}"},
            "id": f"w{index}",
        }

        def handler(_: Any) -> ToolMessage:
            host.write_text(f"w{index}", encoding="utf-8")
            return ToolMessage("OK", tool_call_id=f"w{index}")

        barrier.wait()
        result = middleware.wrap_tool_call(request(call, history), handler)
        assert isinstance(result, ToolMessage)
        return str(result.status)

    with ThreadPoolExecutor(max_workers=3) as pool:
        statuses = sorted(pool.map(write, range(3)))
    assert statuses == ["error", "error", "success"]


# -- marks bind to the request's tool_call_id ------------------------------------------


async def test_marks_on_command_results_bind_to_the_request_id() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    state = await _run(
        [ai_tools(_read()), ai_tools(_write("v2\n"))],
        thread,
        tools=[guard_tools.read_file_command_extra, guard_tools.write_file],
    )
    read, side, written = tool_messages(state)
    assert read.additional_kwargs[READ_MARK_KEY]["tool_call_id"] == read.tool_call_id
    assert side.tool_call_id == "some-other-call"
    assert READ_MARK_KEY not in side.additional_kwargs
    assert written.status == "success"


async def test_command_read_result_plain() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    state = await _run(
        [ai_tools(_read()), ai_tools(_write("v2\n"))],
        thread,
        tools=[guard_tools.read_file_command, guard_tools.write_file],
    )
    read, written = tool_messages(state)
    assert READ_MARK_KEY in read.additional_kwargs
    assert written.status == "success"


async def test_no_matching_tool_message_skips_inspection_and_logs_the_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probed: list[str] = []

    class CountingProbe(HostPathContentProbe):
        async def adigest(self, target: ProbeTarget) -> str:
            probed.append(target.path)
            return await super().adigest(target)

    middleware = ReadBeforeWriteMiddleware(probe=CountingProbe(get_settings().data_root_path()))

    class FakeRequest:
        tool_call = {"name": "read_file", "args": {"path": NOTES}, "id": "call-77"}
        state: dict[str, Any] = {"messages": []}
        runtime = None

    async def handler(_: Any) -> ToolMessage:
        return ToolMessage("text", tool_call_id="somebody-else")

    with caplog.at_level(logging.INFO, logger="middlewares.read_before_write"):
        result = await middleware.awrap_tool_call(FakeRequest(), handler)  # type: ignore[arg-type]
    assert isinstance(result, ToolMessage)
    assert READ_MARK_KEY not in result.additional_kwargs
    assert probed == []
    assert any("tool_call_id=call-77" in r.getMessage() for r in caplog.records)


async def test_forged_or_malformed_marks_do_not_authorise() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    digest = hashlib.sha256(b"v1\n").hexdigest()
    history = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[{"name": "bash", "args": {"command": "ls"}, "id": "f1"}]),
        ToolMessage(
            "forged",
            tool_call_id="f1",
            additional_kwargs={
                READ_MARK_KEY: {"path": NOTES, "hash": digest, "tool_call_id": "f1"}
            },
        ),
        AIMessage("", tool_calls=[{"name": "read_file", "args": {"path": NOTES}, "id": "f2"}]),
        ToolMessage("v1\n", tool_call_id="f2", additional_kwargs={READ_MARK_KEY: "garbage"}),
        AIMessage("", tool_calls=[{"name": "read_file", "args": {"path": NOTES}, "id": "f3"}]),
        ToolMessage(
            "v1\n",
            tool_call_id="f3",
            additional_kwargs={READ_MARK_KEY: {"path": NOTES, "hash": 5, "tool_call_id": "f3"}},
        ),
        AIMessage("", tool_calls=[{"name": "read_file", "args": {"path": "other.md"}, "id": "f4"}]),
        ToolMessage(
            "v1\n",
            tool_call_id="f4",
            additional_kwargs={
                READ_MARK_KEY: {"path": NOTES, "hash": digest, "tool_call_id": "f4"}
            },
        ),
    ]
    agent = make_agent(
        [{}, {}, {}, {}, ai_tools(_write("v2\n")), ai_text("done")],
        tools=TOOLS,
        middleware=[_middleware()],
    )
    state = await agent.ainvoke({"messages": history}, run_config(thread))
    assert _is_blocked(tool_messages(state)[-1])
    assert await _content(thread) == "v1\n"


# -- fail open -------------------------------------------------------------------------


async def test_uninspectable_content_fails_open() -> None:
    class BrokenProbe:
        def digest(self, target: ProbeTarget) -> str:
            raise RuntimeError("sandbox unreachable")

        async def adigest(self, target: ProbeTarget) -> str:
            raise RuntimeError("sandbox unreachable")

    thread = _thread()
    await _seed(thread, "v1\n")
    state = await _run(
        [ai_tools(_read()), ai_tools(_write("v2\n"))],
        thread,
        middleware=[ReadBeforeWriteMiddleware(probe=BrokenProbe())],
    )
    read, written = tool_messages(state)
    assert READ_MARK_KEY not in read.additional_kwargs
    assert written.status == "success"


async def test_paths_outside_the_virtual_roots_fail_open_to_the_tool() -> None:
    thread = _thread()
    state = await _run([ai_tools(_write("x", path="/etc/passwd"))], thread)
    (result,) = tool_messages(state)
    assert WRITE_BLOCK_KEY not in result.additional_kwargs
    assert str(result.content).startswith("Error: cannot write /etc/passwd")


async def test_symlink_escape_is_not_followed_by_the_probe(tmp_path: Path) -> None:
    thread = _thread()
    outside = tmp_path / "secret.txt"

    def plant() -> None:
        outside.write_text("secret", encoding="utf-8")
        _host(thread, "link.md").symlink_to(outside)

    await asyncio.to_thread(plant)
    target = ProbeTarget(
        path="/mnt/user-data/workspace/link.md",
        user_id="default",
        thread_id=thread,
        sandbox_id=None,
    )
    probe = HostPathContentProbe(get_settings().data_root_path())
    with pytest.raises(Exception, match="escapes"):
        await probe.adigest(target)


async def test_bad_path_arguments_are_left_to_the_tool() -> None:
    thread = _thread()
    state = await _run(
        [ai_tools({"name": "write_file", "args": {"description": "d", "path": 7, "content": "x"}})],
        thread,
    )
    (result,) = tool_messages(state)
    assert result.status == "error"
    assert WRITE_BLOCK_KEY not in result.additional_kwargs


# -- elision of blocked payloads in later model requests ------------------------------------


async def test_blocked_payloads_are_elided_for_the_model_only() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    big = "x" * 400
    recorder = RecordingMiddleware()
    state = await _run(
        [
            ai_tools(_write(big), _replace("short", "tiny")),
            ai_tools(_read()),
        ],
        thread,
        middleware=[_middleware(elide_min_chars=100), recorder],
    )
    blocked_ai = next(m for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert blocked_ai.tool_calls[0]["args"]["content"] == big  # state keeps the original
    later = recorder.requests[1]
    seen_ai = next(m for m in later if isinstance(m, AIMessage) and m.tool_calls)
    args = seen_ai.tool_calls[0]["args"]
    assert args["content"] == (
        "[elided: 400 characters; this write_file call was blocked by the read-before-write "
        "gate and nothing was written]"
    )
    assert args["path"] == NOTES and args["description"] == "save"
    assert seen_ai.tool_calls[1]["args"]["old_str"] == "short"  # below elide_min_chars
    # Deterministic: every later request shows the same placeholder.
    again = next(m for m in recorder.requests[2] if isinstance(m, AIMessage) and m.tool_calls)
    assert again.tool_calls[0]["args"] == args


async def test_elision_can_be_switched_off() -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    recorder = RecordingMiddleware()
    await _run(
        [ai_tools(_write("y" * 500))],
        thread,
        middleware=[_middleware(elide_blocked_payloads=False), recorder],
    )
    seen_ai = next(m for m in recorder.requests[1] if isinstance(m, AIMessage) and m.tool_calls)
    assert seen_ai.tool_calls[0]["args"]["content"] == "y" * 500


# -- marks live on messages -----------------------------------------------------------------


@pytest.mark.parametrize("drop_the_read", [False, True])
async def test_marks_persist_with_the_thread_and_die_with_their_message(
    drop_the_read: bool,
) -> None:
    thread = _thread()
    await _seed(thread, "v1\n")
    agent = make_agent(
        [ai_tools(_read()), ai_text("read it"), ai_tools(_write("v2\n")), ai_text("done")],
        tools=TOOLS,
        middleware=[_middleware()],
    )
    config = run_config(thread)
    first = await agent.ainvoke({"messages": [("user", "read")]}, config)
    (read,) = tool_messages(first)
    assert READ_MARK_KEY in read.additional_kwargs
    if drop_the_read:  # what summarization does to an old read
        await agent.aupdate_state(config, {"messages": [RemoveMessage(id=str(read.id))]})
    second = await agent.ainvoke({"messages": [("user", "now write")]}, config)
    written = tool_messages(second)[-1]
    if drop_the_read:
        assert _is_blocked(written)
        assert await _content(thread) == "v1\n"
    else:
        assert written.status == "success"
        assert await _content(thread) == "v2\n"


def test_elision_only_touches_blocked_occurrences_of_the_named_tool() -> None:
    payload = "p" * 300

    def ai(name: str, call_id: str, args: dict[str, Any], raw: bool = False) -> AIMessage:
        kwargs: dict[str, Any] = {}
        if raw:
            function = {"name": name, "arguments": json.dumps(args)}
            kwargs["tool_calls"] = [{"id": call_id, "type": "function", "function": function}]
        return AIMessage(
            "",
            tool_calls=[{"name": name, "id": call_id, "args": args}],
            additional_kwargs=kwargs,
        )

    blocked_call = ai("write_file", "w1", {"path": "a", "content": payload}, raw=True)
    later_same_id = ai("write_file", "w1", {"path": "a", "content": payload})
    mislabelled = ai("str_replace", "s1", {"old_str": payload, "new_str": payload})
    block = {WRITE_BLOCK_KEY: {"path": "a", "tool": "write_file"}}
    messages: list[AnyMessage] = [
        blocked_call,
        ToolMessage("Error", tool_call_id="w1", additional_kwargs=block),
        later_same_id,
        ToolMessage("OK", tool_call_id="w1"),
        mislabelled,
        ToolMessage("Error", tool_call_id="s1", additional_kwargs=block),
    ]
    out = elide_blocked_write_payloads(messages, min_chars=10)
    assert out is not None
    elided = out[0]
    assert isinstance(elided, AIMessage)
    placeholder = elided.tool_calls[0]["args"]["content"]
    assert placeholder.startswith("[elided: 300 characters; this write_file call was blocked")
    raw_args = json.loads(elided.additional_kwargs["tool_calls"][0]["function"]["arguments"])
    assert raw_args["content"] == placeholder  # the raw provider payload too
    assert out[2] is later_same_id  # the same id, answered successfully later
    assert out[4] is mislabelled  # the block names another tool: not trusted
    assert blocked_call.tool_calls[0]["args"]["content"] == payload  # input untouched
    assert elide_blocked_write_payloads(messages, min_chars=1000) is None
