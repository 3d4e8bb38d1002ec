"""Deleting a thread through the real server removes its files (issue 13 item 11).

In-process LangGraph Server, auth mode ``none`` (the single local user): a run
writes into the workspace and outputs, an upload lands in uploads; after
``threads.delete`` the thread's directory under the data root is gone, and a
deletion the API refuses (an unknown thread) removes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.support.server import RequestScopedASGITransport

pytestmark = pytest.mark.server

OUT = "/mnt/user-data/outputs"


@pytest.fixture
async def http(lg_server: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=RequestScopedASGITransport(app=lg_server),
        base_url="http://deerflow.test",
        timeout=60,
    ) as client:
        yield client


def _files(data_root: Path, thread_id: str) -> dict[str, bytes]:
    """Every file of the thread under the data root (blocking: call off the loop)."""
    found: dict[str, bytes] = {}
    for folder in data_root.glob(f"users/*/threads/{thread_id}"):
        for path in folder.rglob("*"):
            if path.is_file():
                found[str(path.relative_to(folder))] = path.read_bytes()
    return found


async def _thread_files(data_root: Path, thread_id: str) -> dict[str, bytes]:
    return await asyncio.to_thread(_files, data_root, thread_id)


async def test_deleting_a_thread_deletes_its_files(
    tmp_path: Path, use_config: Any, lg_client: Any, http: httpx.AsyncClient
) -> None:
    script = [
        ai_tools(tool_call("write_file", description="note", path="notes.md", content="n\n")),
        ai_tools(tool_call("write_file", description="out", path=f"{OUT}/r.md", content="r\n")),
        ai_text("done"),
    ]
    data_root = tmp_path / "data"
    use_config(write_config(tmp_path, script, data_root=str(data_root)))
    client = lg_client()
    keep = (await client.threads.create())["thread_id"]
    thread_id = (await client.threads.create())["thread_id"]
    for tid in (keep, thread_id):
        response = await http.post(
            f"/threads/{tid}/uploads", files=[("files", ("a.txt", b"a\n", "text/plain"))]
        )
        assert response.status_code == 201, response.text
    await client.runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "go"}]}
    )
    before = await _thread_files(data_root, thread_id)
    assert before["user-data/workspace/notes.md"] == b"n\n"
    assert before["user-data/outputs/r.md"] == b"r\n"
    assert before["user-data/uploads/a.txt"] == b"a\n"

    # A deletion the API refuses (no such thread) touches nothing.
    missing = await http.delete("/threads/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    assert await _thread_files(data_root, thread_id) == before

    await client.threads.delete(thread_id)
    assert await _thread_files(data_root, thread_id) == {}
    # Another thread of the same user keeps its files.
    assert await _thread_files(data_root, keep) == {"user-data/uploads/a.txt": b"a\n"}
