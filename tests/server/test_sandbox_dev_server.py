"""Black box: sandbox, tools, uploads and downloads under ``langgraph dev`` with two users.

The server runs the project's real ``langgraph.json`` (real auth, in mode
``api_key`` with keys for Alice and Bob, custom routes behind it). It proves:
a scripted run writes a file in Alice's workspace, copies it to her outputs
with bash and presents it; the file downloads for Alice and answers 404 to Bob
and 401 without a key; an upload shows in the next turn's ``<uploaded_files>``;
and the server logs no blocking-call errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.api_keys import hash_api_key
from sandbox.isolation import probe_namespaces
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.support.server import DevServer

pytestmark = pytest.mark.blackbox

OUT = "/mnt/user-data/outputs"
ALICE_KEY = "dfk_alice-sandbox-key-0123456789"
BOB_KEY = "dfk_bob-sandbox-key-0123456789"


async def test_two_users_upload_run_present_and_download_under_langgraph_dev(
    tmp_path: Path, dev_server: Callable[..., DevServer]
) -> None:
    script = [
        ai_tools(
            tool_call(
                "write_file",
                description="draft the report in the workspace",
                path="report.md",
                content="# Report for Alice\n",
            )
        ),
        ai_tools(
            tool_call(
                "bash",
                description="check the upload and publish the report",
                command=(
                    "wc -l /mnt/user-data/uploads/notes.txt && pwd && echo $HOME_TOKEN && "
                    f"cp report.md {OUT}/report.md"
                ),
            )
        ),
        ai_tools(tool_call("present_files", filepaths=[f"{OUT}/report.md"])),
        ai_text("Report presented."),
    ]
    data_root = tmp_path / "data"
    auth: dict[str, Any] = {
        "mode": "api_key",
        "api_keys": [
            {"identity": "alice", "sha256": hash_api_key(ALICE_KEY)},
            {"identity": "bob", "sha256": hash_api_key(BOB_KEY)},
        ],
    }
    config = write_config(tmp_path, script, data_root=str(data_root), auth=auth)
    server = dev_server(
        env={
            "DEERFLOW_CONFIG": str(config),
            "DEERFLOW_DATA_ROOT": str(data_root),
            "HOME_TOKEN": "must-not-leak",
        }
    )
    alice = {"x-api-key": ALICE_KEY}
    bob = {"x-api-key": BOB_KEY}
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        thread = (await http.post("/threads", json={}, headers=alice)).json()
        thread_id = thread["thread_id"]
        uploads = f"/threads/{thread_id}/uploads"
        files = {"files": ("notes.txt", b"one\ntwo\nthree\n", "text/plain")}

        assert (await http.post(uploads, files=files)).status_code == 401
        assert (await http.post(uploads, files=files, headers=bob)).status_code == 404
        assert (await http.get(uploads, headers=bob)).status_code == 404
        created = await http.post(uploads, files=files, headers=alice)
        assert created.status_code == 201, created.text
        reference = created.json()["files"][0]

        run = await http.post(
            f"/threads/{thread_id}/runs/wait",
            headers=alice,
            json={
                "assistant_id": "lead_agent",
                "input": {
                    "messages": [
                        {
                            "role": "user",
                            "content": "Summarise my notes.",
                            "additional_kwargs": {"files": [reference]},
                        }
                    ]
                },
            },
        )
        assert run.status_code == 200, run.text
        values = run.json()
        assert values["artifacts"] == [f"{OUT}/report.md"]
        messages = values["messages"]
        assert messages[0]["content"].startswith("<uploaded_files>\nFiles attached")
        assert "notes.txt (14 B) at /mnt/user-data/uploads/notes.txt" in messages[0]["content"]
        assert messages[2]["content"] == "Wrote 19 bytes to report.md."
        bash_result = messages[4]["content"]
        assert "3 /mnt/user-data/uploads/notes.txt" in bash_result
        assert "/mnt/user-data/workspace" in bash_result
        assert "must-not-leak" not in bash_result
        assert str(data_root) not in bash_result
        assert bash_result.endswith("[exit code: 0]")
        assert messages[-1]["content"] == "Report presented."

        download = f"/threads/{thread_id}/outputs/report.md"
        got = await http.get(download, headers=alice)
        assert got.status_code == 200 and got.content == b"# Report for Alice\n"
        assert (await http.get(download, headers=bob)).status_code == 404
        assert (await http.get(download)).status_code == 401
        assert (await http.get(f"/threads/{thread_id}", headers=bob)).status_code == 404

    bucket = data_root / "users" / "alice" / "threads" / thread_id / "user-data"
    assert (bucket / "outputs" / "report.md").read_text() == "# Report for Alice\n"
    assert (bucket / "uploads" / "notes.txt").exists()
    assert not (data_root / "users" / "bob").exists()
    assert not (data_root / "users" / "default").exists()
    log = await server.alog()
    assert "BlockingError" not in log, log
    assert "Blocking call" not in log, log
    # The provider says at start-up what commands get (here: namespaces, or the shout).
    namespaces_unavailable, _ = await asyncio.to_thread(probe_namespaces)
    if namespaces_unavailable is None:
        assert "every command runs in its own user/pid/mount" in log, log
    else:
        assert "NOT an isolation boundary" in log
