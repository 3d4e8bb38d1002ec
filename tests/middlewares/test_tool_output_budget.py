"""ToolOutputBudgetMiddleware through real runs: 20 MB text, 6 MB CSV, fallbacks, elision.

The full output must be readable by the agent at the virtual path the synopsis
names. The sandbox's ``read_file`` is another issue's; here a test
``read_file`` tool maps ``/mnt/user-data/outputs/...`` to the thread's host
outputs directory exactly as the sandbox contract defines it, and the scripted
model calls it in the same run.
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
from pathlib import Path
from typing import Any

import pytest
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool

from auth.identity import resolve_runtime_user_id
from middlewares.tool_output_budget import (
    TOOL_OUTPUT_KEY,
    externalize_output,
    tool_output_filename,
)
from middlewares.tool_transform_meta import tool_transforms
from runtime.config import Settings, ToolOutputConfig
from runtime.paths import VIRTUAL_OUTPUTS, thread_paths
from tests.support.agents import make_agent, run_config, settings_for
from tests.support.strict_provider import StrictRecordingModel

TWENTY_MB = 20 * 1024 * 1024


def _settings(tmp_path: Path, **tool_output: Any) -> Settings:
    return settings_for(tmp_path / "data", tool_output=tool_output)


def _read_file_tool(settings: Settings) -> BaseTool:
    @tool
    def read_file(
        path: str,
        runtime: ToolRuntime[Any, Any],
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str:
        """Read a file under /mnt/user-data/outputs (test stand-in for the sandbox tool)."""
        if not path.startswith(VIRTUAL_OUTPUTS + "/"):
            raise ValueError(f"not an outputs path: {path}")
        thread_id = runtime.config["configurable"]["thread_id"]
        outputs = thread_paths(
            settings.data_root_path(), resolve_runtime_user_id(runtime), thread_id
        ).outputs
        host = (outputs / path[len(VIRTUAL_OUTPUTS) + 1 :]).resolve()
        assert host.is_relative_to(outputs.resolve())
        lines = host.read_text(encoding="utf-8").splitlines(keepends=True)
        start = (start_line or 1) - 1
        return "".join(lines[start : end_line or len(lines)])

    return read_file


def _host_path(settings: Settings, config: Any, virtual: str) -> Path:
    outputs = thread_paths(
        settings.data_root_path(),
        config["configurable"]["langgraph_auth_user_id"],
        config["configurable"]["thread_id"],
    ).outputs
    return outputs / virtual[len(VIRTUAL_OUTPUTS) + 1 :]


async def _read(path: Path) -> str:
    """Read off the event loop (the in-process server's blocking-call guard may be on)."""
    return await asyncio.to_thread(path.read_text, encoding="utf-8")


def _twenty_mb_text() -> str:
    line = "log line {:08d}: the quick brown fox jumps over the lazy dog\n"
    count = TWENTY_MB // len(line.format(0)) + 1
    return "".join(line.format(i) for i in range(count))[: TWENTY_MB - 7] + "\nEXIT 0"


def _tool_message(messages: list[Any], call_id: str) -> ToolMessage:
    return next(m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == call_id)


async def test_twenty_megabytes_go_to_a_file_the_agent_can_read(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    big_text = _twenty_mb_text()

    @tool
    async def dump_logs() -> str:
        """Print a lot of logs."""
        return big_text

    virtual = f"{VIRTUAL_OUTPUTS}/.tool-results/" + tool_output_filename(
        "dump_logs", "call_dump", big_text, "txt"
    )
    model = StrictRecordingModel.play(
        [
            {"tool_calls": [{"name": "dump_logs", "args": {}, "id": "call_dump"}]},
            {
                "tool_calls": [
                    {
                        "name": "read_file",
                        "args": {"path": virtual, "start_line": 3, "end_line": 4},
                        "id": "call_read",
                    }
                ]
            },
            {"content": "I read it."},
        ]
    )
    agent = make_agent(model, [dump_logs, _read_file_tool(settings)], settings=settings)
    config = run_config()
    result = await agent.ainvoke({"messages": [HumanMessage("dump the logs")]}, config)

    assert result["messages"][-1].content == "I read it."
    stored = _tool_message(result["messages"], "call_dump")
    assert isinstance(stored.content, str)
    assert len(stored.content) < 8_000
    assert virtual in stored.content
    assert "log line 00000000" in stored.content  # head
    assert stored.content.rstrip().endswith("--- end of synopsis ---")
    assert "EXIT 0" in stored.content  # tail keeps the exit marker
    assert stored.additional_kwargs[TOOL_OUTPUT_KEY]["bytes"] == len(big_text.encode())
    assert [t["kind"] for t in tool_transforms(stored)] == ["externalize"]
    # The receipt describes the raw output, not the synopsis.
    assert stored.additional_kwargs["deerflow_tool_receipt"]["output_bytes"] == len(big_text)

    host = _host_path(settings, config, virtual)
    assert await _read(host) == big_text
    assert ".tool-results" in host.parts and "alice" in host.parts
    assert not await asyncio.to_thread(lambda: list(host.parent.glob(".tool-output-*.tmp")))

    read_back = _tool_message(result["messages"], "call_read")
    assert read_back.content == "".join(big_text.splitlines(keepends=True)[2:4])

    # What the model saw: the synopsis, never the 20 MB.
    for request in model.requests:
        assert sum(len(str(m.content)) for m in request) < 50_000


def _csv_with_multiline_records(target_bytes: int) -> tuple[str, int]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", "name", "comment", "score"])
    rows = 0
    while buffer.tell() < target_bytes:
        comment = f"first line of {rows}\nsecond line, with a comma" if rows % 3 == 0 else "plain"
        writer.writerow([rows, f"name-{rows}", comment, rows % 97])
        rows += 1
        if rows % 1000 == 0:
            buffer.write("\n")  # blank lines are not records
    return buffer.getvalue(), rows


def _line_counts(text: str) -> set[str]:
    physical = text.count("\n")
    nonblank = sum(1 for line in text.splitlines() if line.strip())
    return {f"{n:,}" for n in (physical, physical + 1, nonblank, nonblank - 1)}


async def _run_tool(
    settings: Settings, output: Any, *, name: str = "export"
) -> tuple[ToolMessage, Any]:
    @tool(name)
    async def producer() -> Any:
        """Produce a fixed output (test tool)."""
        return output

    model = StrictRecordingModel.play(
        [{"tool_calls": [{"name": name, "args": {}, "id": "call_out"}]}, {"content": "ok"}]
    )
    agent = make_agent(model, [producer], settings=settings)
    config = run_config()
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    return _tool_message(result["messages"], "call_out"), (model, config)


async def test_six_megabyte_csv_count_is_undetermined_never_a_line_count(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    text, _rows = _csv_with_multiline_records(6 * 1024 * 1024)
    assert len(text.encode()) > 5_000_000
    message, (_model, config) = await _run_tool(settings, text)
    synopsis = str(message.content)
    assert "CSV table, 4 columns (id, name, comment, score)" in synopsis
    assert (
        "record count undetermined: the table exceeds the 5,000,000-byte counting guard" in synopsis
    )
    header = synopsis.split("--- head", 1)[0]
    for count in _line_counts(text):
        assert count not in header
    assert message.additional_kwargs[TOOL_OUTPUT_KEY]["records"] is None
    path = message.additional_kwargs[TOOL_OUTPUT_KEY]["virtual_path"]
    assert path.endswith(".csv")
    assert await _read(_host_path(settings, config, path)) == text


async def test_csv_under_the_guard_counts_logical_records(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    text, rows = _csv_with_multiline_records(3 * 1024 * 1024)
    message, _ = await _run_tool(settings, text)
    synopsis = str(message.content)
    assert f"{rows:,} records excluding the header" in synopsis
    assert f"{rows:,}" not in _line_counts(text)  # the count is not a line count
    assert message.additional_kwargs[TOOL_OUTPUT_KEY]["records"] == rows


async def test_tsv_is_recognised(tmp_path: Path) -> None:
    settings = _settings(tmp_path, max_chars=1_000)
    text = "a\tb\tc\n" + "".join(f"{i}\tx{i}\ty\n" for i in range(500))
    message, _ = await _run_tool(settings, text)
    assert "TSV table, 3 columns (a, b, c); 500 records excluding the header" in str(
        message.content
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('id,blob\n1,ok\n2,ok\n3,"' + "x" * 200_000 + '"\n', "field larger than field limit"),
        ('id,val\n1,a\n2,b\n3,"unterminated\n' + "4,c\n" * 5000, "unexpected end of data"),
        ('id,val\n1,a\n2,b\n3,"q"tail\n' + "4,c\n" * 5000, "expected after"),
    ],
)
async def test_parse_errors_give_an_undetermined_count(
    tmp_path: Path, text: str, reason: str
) -> None:
    settings = _settings(tmp_path, max_chars=1_000)
    message, _ = await _run_tool(settings, text)
    header = str(message.content).split("--- head", 1)[0]
    assert "record count undetermined: the table could not be parsed" in header
    assert reason in header
    for count in _line_counts(text):
        assert f"; {count} records" not in header


async def test_write_failure_falls_back_inline_with_a_note(tmp_path: Path) -> None:
    settings = _settings(tmp_path, max_chars=1_000, inline_fallback_max_chars=5_000)
    text = "".join(f"row {i}\n" for i in range(10_000))

    # Make the outputs directory impossible to create: a file is in the way.
    config = run_config()
    outputs = thread_paths(
        settings.data_root_path(), "alice", config["configurable"]["thread_id"]
    ).outputs
    await asyncio.to_thread(outputs.parent.mkdir, parents=True)
    await asyncio.to_thread(outputs.write_text, "not a directory")

    @tool
    async def export() -> str:
        """Produce a big output (test tool)."""
        return text

    model = StrictRecordingModel.play(
        [
            {"tool_calls": [{"name": "export", "args": {}, "id": "call_out"}]},
            {"content": "ok"},
        ]
    )
    agent = make_agent(model, [export], settings=settings)
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    message = _tool_message(result["messages"], "call_out")
    content = str(message.content)
    assert "could not be saved" in content
    assert len(content) <= 5_000
    assert content.count("row 0\n") == 1 and "row 9999" in content
    assert [t["kind"] for t in tool_transforms(message)] == ["inline_fallback"]
    assert TOOL_OUTPUT_KEY not in message.additional_kwargs
    # The model request stays within the budget even so.
    tool_in_request = _tool_message(model.requests[-1], "call_out")
    assert len(str(tool_in_request.content)) <= 5_000


async def test_unencodable_output_falls_back_inline(tmp_path: Path) -> None:
    settings = _settings(tmp_path, max_chars=1_000, inline_fallback_max_chars=3_000)
    text = "bad surrogate \ud800 " * 400
    message, _ = await _run_tool(settings, text)
    assert "could not be saved (UnicodeEncodeError" in str(message.content)
    assert [t["kind"] for t in tool_transforms(message)] == ["inline_fallback"]


async def test_mixed_media_result_keeps_its_image(tmp_path: Path) -> None:
    settings = _settings(tmp_path, max_chars=1_000)
    image = {"type": "image", "base64": "aGVsbG8=", "mime_type": "image/png"}
    blocks = [{"type": "text", "text": "caption " * 500}, image]
    message, (_, config) = await _run_tool(settings, blocks)
    assert isinstance(message.content, list)
    assert image in message.content
    text_blocks = [b for b in message.content if isinstance(b, dict) and b.get("type") == "text"]
    assert len(text_blocks) == 1 and "was saved to" in text_blocks[0]["text"]
    saved = message.additional_kwargs[TOOL_OUTPUT_KEY]["virtual_path"]
    assert await _read(_host_path(settings, config, saved)) == "caption " * 500


def test_identical_output_reuses_one_file_and_ids_never_leak(tmp_path: Path) -> None:
    config = ToolOutputConfig()
    outputs = tmp_path / "outputs"
    kwargs: dict[str, Any] = {"tool_name": "export", "outputs_dir": outputs, "config": config}
    first = externalize_output("same\n" * 1000, tool_call_id="call/../x", **kwargs)
    again = externalize_output("same\n" * 1000, tool_call_id="call/../x", **kwargs)
    other_id = externalize_output("same\n" * 1000, tool_call_id="call_other", **kwargs)
    other_text = externalize_output("different\n" * 1000, tool_call_id="call/../x", **kwargs)
    assert first.virtual_path == again.virtual_path
    assert len({first.virtual_path, other_id.virtual_path, other_text.virtual_path}) == 3
    files = sorted(p.name for p in (outputs / ".tool-results").iterdir())
    assert len(files) == 3 and not any("call" in name or ".tmp" in name for name in files)
    # A missing id and an empty id are the same (length-prefixed) and differ from "0:".
    assert tool_output_filename("t", None, "x", "txt") == tool_output_filename("t", "", "x", "txt")
    assert tool_output_filename("t", "a", "bx", "txt") != tool_output_filename(
        "t", "ab", "x", "txt"
    )


async def test_exempt_tools_are_not_budgeted(tmp_path: Path) -> None:
    settings = _settings(tmp_path, max_chars=1_000, exempt_tools=["export"])
    message, _ = await _run_tool(settings, "z" * 5_000)
    assert message.content == "z" * 5_000


async def test_oversized_message_from_an_old_checkpoint_is_budgeted_in_the_request(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path, max_chars=1_000)
    huge = "old output line\n" * 2_000
    history = [
        HumanMessage("earlier"),
        AIMessage("", tool_calls=[{"name": "bash", "args": {"command": "x"}, "id": "old"}]),
        ToolMessage(huge, tool_call_id="old", name="bash"),
        HumanMessage("and now"),
    ]
    model = StrictRecordingModel.play([{"content": "x"}, {"content": "answer"}])
    agent = make_agent(model, [], settings=settings)
    config = run_config()
    result = await agent.ainvoke({"messages": history}, config)
    assert _tool_message(result["messages"], "old").content == huge  # state untouched
    sent = _tool_message(model.requests[-1], "old")
    assert "was saved to" in str(sent.content) and len(str(sent.content)) < 8_000
    virtual = re.search(r"(/mnt/user-data/outputs/\S+\.txt)", str(sent.content))
    assert virtual is not None
    assert await _read(_host_path(settings, config, virtual.group(1))) == huge


async def test_superseded_writes_are_elided_in_the_request_only(tmp_path: Path) -> None:
    settings = _settings(tmp_path, superseded_write_min_chars=100, keep_recent_writes=1)
    body = "file body\n" * 50
    history: list[Any] = [HumanMessage("write things")]

    def call(name: str, call_id: str, **args: Any) -> None:
        history.append(AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}]))
        history.append(ToolMessage("ok", tool_call_id=call_id, name=name))

    call("write_file", "w1", path="/mnt/user-data/workspace/a.txt", content=body)
    call("read_file", "r1", path="/mnt/user-data/workspace//a.txt")
    call("write_file", "w2", path="/mnt/user-data/workspace/b.txt", content=body)
    call("write_file", "w3", path="/mnt/user-data/workspace/b.txt", content=body + "v2")
    history.append(HumanMessage("done?"))
    turns = sum(1 for m in history if isinstance(m, AIMessage))
    model = StrictRecordingModel.play([{"content": "-"}] * turns + [{"content": "yes"}])
    agent = make_agent(model, [], settings=settings)
    result = await agent.ainvoke({"messages": history}, run_config())
    sent = {
        m.tool_calls[0]["id"]: m.tool_calls[0]["args"]
        for m in model.requests[-1]
        if isinstance(m, AIMessage) and m.tool_calls
    }
    assert sent["w1"]["content"].startswith(
        "[elided: 500 characters written to /mnt/user-data/workspace/a.txt"
    )
    assert sent["w2"]["content"].startswith("[elided:")
    assert sent["w3"]["content"] == body + "v2"  # the newest write is kept
    stored = next(
        m
        for m in result["messages"]
        if isinstance(m, AIMessage) and m.tool_calls and m.tool_calls[0]["id"] == "w1"
    )
    assert stored.tool_calls[0]["args"]["content"] == body
