"""Uploads and downloads through the real LangGraph Server (in-process, over ASGI).

Most tests run in auth mode ``none`` (the single local user); the last one
switches the served config to mode ``api_key`` for Alice and Bob. The same
flow is proven black-box under ``langgraph dev`` in
``tests/server/test_sandbox_dev_server.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.api_keys import hash_api_key
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


async def _thread(lg_client: Any) -> str:
    thread = await lg_client().threads.create()
    return str(thread["thread_id"])


async def test_upload_list_and_next_turn_sees_uploaded_files(
    tmp_path: Path, use_config: Any, lg_client: Any, http: httpx.AsyncClient
) -> None:
    use_config(write_config(tmp_path, [ai_text("I see your files.")]))
    thread_id = await _thread(lg_client)
    response = await http.post(
        f"/threads/{thread_id}/uploads",
        files=[
            ("files", ("notes.md", b"# Plan\n## Budget\nbody\n", "text/markdown")),
            ("files", ("data.csv", b"city,population\nOslo,700000\n", "text/csv")),
        ],
    )
    assert response.status_code == 201, response.text
    uploaded = response.json()["files"]
    assert [(f["filename"], f["size"], f["path"]) for f in uploaded] == [
        ("notes.md", 22, "/mnt/user-data/uploads/notes.md"),
        ("data.csv", 28, "/mnt/user-data/uploads/data.csv"),
    ]
    listing = (await http.get(f"/threads/{thread_id}/uploads")).json()["files"]
    assert sorted(f["filename"] for f in listing) == ["data.csv", "notes.md"]

    await lg_client().runs.wait(
        thread_id,
        "lead_agent",
        input={
            "messages": [
                {
                    "role": "user",
                    "content": "What is in my notes?",
                    "additional_kwargs": {"files": [{"filename": "notes.md"}]},
                }
            ]
        },
    )
    state = await lg_client().threads.get_state(thread_id)
    human = state["values"]["messages"][0]
    content = human["content"]
    assert content.startswith("<uploaded_files>")
    assert content.endswith("</uploaded_files>\n\nWhat is in my notes?")
    attached, earlier = content.split("Files uploaded earlier in this thread:")
    assert "notes.md (22 B) at /mnt/user-data/uploads/notes.md" in attached
    assert "Outline: # Plan; ## Budget" in attached
    assert "data.csv (28 B) at /mnt/user-data/uploads/data.csv" in earlier
    assert "columns: city,population" in earlier
    kwargs = human["additional_kwargs"]
    assert kwargs["original_user_content"] == "What is in my notes?"
    assert [(f["filename"], f["status"]) for f in kwargs["uploaded_files"]] == [
        ("notes.md", "current"),
        ("data.csv", "earlier"),
    ]


async def test_written_and_presented_file_downloads(
    tmp_path: Path, use_config: Any, lg_client: Any, http: httpx.AsyncClient
) -> None:
    script = [
        ai_tools(
            tool_call(
                "write_file", description="report", path=f"{OUT}/report.md", content="# Report\n"
            ),
            tool_call("write_file", description="draft", path=f"{OUT}/draft.md", content="x"),
        ),
        ai_tools(tool_call("present_files", filepaths=[f"{OUT}/report.md"])),
        ai_text("Your report is ready."),
    ]
    use_config(write_config(tmp_path, script))
    thread_id = await _thread(lg_client)
    result = await lg_client().runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "report"}]}
    )
    assert result["artifacts"] == [f"{OUT}/report.md"]
    assert result["sandbox"]["sandbox_id"]

    response = await http.get(f"/threads/{thread_id}/outputs/report.md")
    assert response.status_code == 200
    assert response.content == b"# Report\n"
    assert response.headers["content-disposition"] == "attachment; filename*=UTF-8''report.md"
    assert response.headers["x-content-type-options"] == "nosniff"

    # Written but never presented, missing, escaping, or another thread: 404.
    for path in ("draft.md", "missing.md", "..%2F..%2Fuploads%2Fx", "%2E%2E/%2E%2E/x"):
        assert (await http.get(f"/threads/{thread_id}/outputs/{path}")).status_code == 404
    other = await _thread(lg_client)
    assert (await http.get(f"/threads/{other}/outputs/report.md")).status_code == 404
    missing = "00000000-0000-0000-0000-000000000000"
    assert (await http.get(f"/threads/{missing}/outputs/report.md")).status_code == 404


async def test_internal_tool_output_storage_is_never_downloadable(
    tmp_path: Path, use_config: Any, lg_client: Any, http: httpx.AsyncClient
) -> None:
    """Issue 19.7: `.tool-results` is refused even if it got into `artifacts` somehow."""
    internal = f"{OUT}/.tool-results/echo-abc.txt"
    script = [
        ai_tools(tool_call("write_file", description="d", path=internal, content="x")),
        ai_text("ok"),
    ]
    use_config(write_config(tmp_path, script))
    thread_id = await _thread(lg_client)
    await lg_client().runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "go"}]}
    )
    await lg_client().threads.update_state(thread_id, {"artifacts": [internal]})
    response = await http.get(f"/threads/{thread_id}/outputs/.tool-results/echo-abc.txt")
    assert response.status_code == 404
    assert "internal" in response.json()["detail"]


async def test_upload_limits_and_names(
    tmp_path: Path, use_config: Any, lg_client: Any, http: httpx.AsyncClient
) -> None:
    use_config(
        write_config(tmp_path, [ai_text("ok")], uploads={"max_file_bytes": 1000, "max_files": 2})
    )
    thread_id = await _thread(lg_client)
    url = f"/threads/{thread_id}/uploads"

    too_big = await http.post(url, files={"f": ("big.bin", b"x" * 1001)})
    assert too_big.status_code == 413 and "big.bin" in too_big.json()["detail"]
    too_many = await http.post(url, files=[("f", (f"{i}.txt", b"x")) for i in range(3)])
    assert too_many.status_code == 400
    assert (await http.get(f"/threads/{thread_id}/uploads")).json()["files"] == []

    renamed = await http.post(
        url,
        files=[
            ("f", ("../../etc/passwd", b"not really")),
            ("f", ("C:\\Users\\me\\.hidden report.txt", b"windows")),
        ],
    )
    assert renamed.status_code == 201, renamed.text
    assert [f["filename"] for f in renamed.json()["files"]] == ["passwd", "hidden report.txt"]

    for bad in ("..", "...", "/", "   ", "a/.."):
        response = await http.post(url, files={"f": (bad, b"x")})
        assert response.status_code == 400, bad
    duplicate = await http.post(url, files=[("f", ("a.txt", b"1")), ("f", ("a.txt", b"2"))])
    assert duplicate.status_code == 400
    assert (
        await http.post(url, content=b"raw", headers={"content-type": "text/plain"})
    ).status_code == 415

    replaced = await http.post(url, files={"f": ("passwd", b"second version")})
    assert replaced.status_code == 201
    listing = {f["filename"]: f["size"] for f in (await http.get(url)).json()["files"]}
    assert listing == {"passwd": len(b"second version"), "hidden report.txt": 7}

    missing = "00000000-0000-0000-0000-000000000000"
    assert (
        await http.post(f"/threads/{missing}/uploads", files={"f": ("a", b"x")})
    ).status_code == 404
    assert (await http.get(f"/threads/{missing}/uploads")).status_code == 404
    assert (await http.get("/threads/not..safe/uploads")).status_code == 404


async def test_another_users_thread_answers_404(
    tmp_path: Path, use_config: Any, lg_client: Any, http: httpx.AsyncClient
) -> None:
    keys = {"alice": "dfk_alice-http-key-0123456789", "bob": "dfk_bob-http-key-0123456789"}
    script = [
        ai_tools(tool_call("write_file", description="d", path=f"{OUT}/a.md", content="A")),
        ai_tools(tool_call("present_files", filepaths=[f"{OUT}/a.md"])),
        ai_text("done"),
    ]
    auth = {
        "mode": "api_key",
        "api_keys": [{"identity": who, "sha256": hash_api_key(key)} for who, key in keys.items()],
    }
    use_config(write_config(tmp_path, script, auth=auth))
    alice = {"x-api-key": keys["alice"]}
    bob = {"x-api-key": keys["bob"]}
    client = lg_client(headers=alice)
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "go"}]}
    )
    files = {"f": ("n.txt", b"x")}
    uploads = f"/threads/{thread_id}/uploads"
    download = f"/threads/{thread_id}/outputs/a.md"

    assert (await http.post(uploads, files=files, headers=alice)).status_code == 201
    assert (await http.get(download, headers=alice)).content == b"A"
    for headers, status in (
        (bob, 404),
        ({}, 401),
        ({"x-api-key": "dfk_wrong-key-0123456789"}, 401),
    ):
        assert (await http.post(uploads, files=files, headers=headers)).status_code == status
        assert (await http.get(uploads, headers=headers)).status_code == status
        assert (await http.get(download, headers=headers)).status_code == status
