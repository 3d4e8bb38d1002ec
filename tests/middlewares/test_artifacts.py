"""Artifacts (10, 16): capture of presented files and MCP resources; handles resolve to paths."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from middlewares.artifact_capture import ARTIFACT_DIR, ArtifactCaptureMiddleware, artifact_handle
from middlewares.artifact_resolution import ArtifactResolutionMiddleware
from runtime.state import merge_artifact_handles
from tests.support.artifact_tools import BLOB, NOTE
from tests.support.sandbox_runs import make_settings, run_agent, tool_messages
from tests.support.scripted import ai_text, ai_tools, tool_call

EXPORT = {"name": "mcp_export", "group": "test", "use": "tests.support.artifact_tools:mcp_export"}
PLAIN = {
    "name": "not_mcp_export",
    "group": "test",
    "use": "tests.support.artifact_tools:not_mcp_export",
}
READ = {"name": "read_file", "group": "files", "use": "tools.files:read_file"}
BLOB_HANDLE = artifact_handle("blob", hashlib.sha256(BLOB).hexdigest())
NOTE_HANDLE = artifact_handle("blob", hashlib.sha256(NOTE.encode()).hexdigest())
BLOB_PATH = f"{ARTIFACT_DIR}/{hashlib.sha256(BLOB).hexdigest()[:12]}-data.bin"
NOTE_PATH = f"{ARTIFACT_DIR}/{hashlib.sha256(NOTE.encode()).hexdigest()[:12]}-q3.txt"


def _outputs(settings: Any, thread: str, user: str = "alice") -> Path:
    return settings.data_root_path() / f"users/{user}/threads/{thread}/user-data/outputs"


async def test_mcp_resources_become_artifacts_and_handles_resolve(tmp_path: Path) -> None:
    script = [
        ai_tools(tool_call("mcp_export")),
        ai_tools(tool_call("read_file", description="read it", path=NOTE_HANDLE)),
        ai_tools(tool_call("read_file", description="read it", path="artifact://" + "0" * 24)),
        ai_text("done"),
    ]
    settings = make_settings(tmp_path, script, tools=[EXPORT, READ])
    result = await run_agent(settings, "export", thread_id="a1")
    exported, read, unknown = tool_messages(result)

    # The bytes are on disk in the thread's outputs, and no longer in the message.
    outputs = _outputs(settings, "a1")
    on_disk = await asyncio.to_thread(
        lambda: {p.name: p.read_bytes() for p in (outputs / "mcp").iterdir()}
    )
    assert on_disk == {
        BLOB_PATH.rsplit("/", 1)[1]: BLOB,
        NOTE_PATH.rsplit("/", 1)[1]: NOTE.encode(),
    }
    stored = json.dumps(exported.artifact)
    assert "bytes_b64" not in stored and NOTE not in stored
    assert f"[artifact {BLOB_HANDLE}: mem://data.bin saved as {BLOB_PATH}]" in exported.text
    assert "not saved: its content is not valid base64" in exported.text
    link = artifact_handle("link", "https://example.com/report.pdf")
    assert f"[artifact {link}: resource link https://example.com/report.pdf]" in exported.text

    assert result["artifacts"] == [BLOB_PATH, NOTE_PATH]
    handles = result["artifact_handles"]
    assert handles[BLOB_HANDLE]["path"] == BLOB_PATH
    assert (
        handles[BLOB_HANDLE]["size"] == len(BLOB) and handles[BLOB_HANDLE]["source"] == "mcp_export"
    )
    assert handles[link]["path"] is None and handles[link]["kind"] == "link"

    # A later tool call names the handle; the tool got the sandbox path.
    assert read.status == "success" and "quarterly numbers: 42" in read.text, read.text
    assert unknown.status == "error" and "is not an artifact file of this thread" in unknown.text
    # The checkpointed call keeps the stable handle.
    calls = [c for m in result["messages"] if isinstance(m, AIMessage) for c in m.tool_calls]
    assert calls[1]["args"]["path"] == NOTE_HANDLE


async def test_resources_from_an_unmarked_tool_are_not_captured(tmp_path: Path) -> None:
    script = [ai_tools(tool_call("not_mcp_export")), ai_text("done")]
    settings = make_settings(tmp_path, script, tools=[PLAIN, READ])
    result = await run_agent(settings, "export", thread_id="a2")
    (message,) = tool_messages(result)
    assert "artifact://" not in message.text
    assert not result.get("artifacts") and not result.get("artifact_handles")
    assert not await asyncio.to_thread((_outputs(settings, "a2") / "mcp").exists)


async def test_presented_files_get_handles(tmp_path: Path) -> None:
    script = [
        ai_tools(
            tool_call(
                "write_file",
                description="write it",
                path="/mnt/user-data/outputs/r.md",
                content="# R\n",
            )
        ),
        ai_tools(tool_call("present_files", filepaths=["/mnt/user-data/outputs/r.md"])),
        ai_tools(
            tool_call(
                "read_file",
                description="read it",
                path=artifact_handle("file", "/mnt/user-data/outputs/r.md"),
            )
        ),
        ai_text("done"),
    ]
    result = await run_agent(make_settings(tmp_path, script), "report", thread_id="a3")
    _, presented, read = tool_messages(result)
    handle = artifact_handle("file", "/mnt/user-data/outputs/r.md")
    assert f"- /mnt/user-data/outputs/r.md: {handle}" in presented.text
    assert result["artifact_handles"][handle]["path"] == "/mnt/user-data/outputs/r.md"
    assert read.status == "success" and "# R" in read.text


async def test_forged_handles_outside_outputs_do_not_resolve(tmp_path: Path) -> None:
    forged = "artifact://" + "a" * 24
    script = [ai_tools(tool_call("read_file", description="read it", path=forged)), ai_text("done")]
    settings = make_settings(tmp_path, script)
    result = await run_agent(
        settings,
        {
            "messages": [{"role": "user", "content": "read"}],
            "artifact_handles": {forged: {"path": "/mnt/user-data/uploads/../../x"}},
        },
        thread_id="a4",
    )
    (read,) = tool_messages(result)
    assert read.status == "error" and forged in read.text


def test_handle_reducer_ignores_malformed_values() -> None:
    record = {"path": "/mnt/user-data/outputs/a"}
    assert merge_artifact_handles({"h": record}, {"g": record, 1: record, "x": "junk"}) == {  # type: ignore[dict-item]
        "h": record,
        "g": record,
    }
    assert merge_artifact_handles("junk", None) == {}  # type: ignore[arg-type]


def test_constructor_validation(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [ai_text("x")])
    with pytest.raises(ValueError, match="max_resource_bytes"):
        ArtifactCaptureMiddleware(settings, max_resource_bytes=0)
    assert ArtifactResolutionMiddleware().name == "ArtifactResolutionMiddleware"
    assert isinstance(ToolMessage(content="", tool_call_id="x"), ToolMessage)
