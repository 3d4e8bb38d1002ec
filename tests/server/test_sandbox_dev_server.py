"""Black box: sandbox, tools, uploads and downloads under ``langgraph dev`` with two users.

The server is started from a langgraph.json that registers the project's
graphs and HTTP app exactly as the real one does, plus a test-only header
auth (``tests/support/header_auth.py``) with ``enable_custom_route_auth``, so
Alice and Bob are real, separately authenticated users. It proves: a scripted
run writes, runs bash in and presents files in Alice's bucket; the file
downloads for Alice and 404s for Bob; an upload shows in the next turn's
``<uploaded_files>``; and the server logs no blocking-call errors.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.support.server import PROJECT_ROOT, DevServer

pytestmark = pytest.mark.blackbox

OUT = "/mnt/user-data/outputs"


def _langgraph_json(directory: Path) -> Path:
    base = json.loads((PROJECT_ROOT / "langgraph.json").read_text())

    def absolute(spec: str) -> str:
        path, _, attr = spec.partition(":")
        return f"{(PROJECT_ROOT / path).resolve()}:{attr}"

    config = {
        "python_version": base["python_version"],
        "dependencies": [str(PROJECT_ROOT)],
        "graphs": {name: absolute(spec) for name, spec in base["graphs"].items()},
        "http": {"app": absolute(base["http"]["app"]), "enable_custom_route_auth": True},
        "auth": {"path": f"{PROJECT_ROOT / 'tests/support/header_auth.py'}:auth"},
    }
    path = directory / "langgraph.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


async def test_two_users_upload_run_present_and_download_under_langgraph_dev(
    tmp_path: Path,
) -> None:
    script = [
        ai_tools(
            tool_call(
                "bash",
                description="look at the upload",
                command="wc -l /mnt/user-data/uploads/notes.txt && pwd && echo $HOME_TOKEN",
            ),
            tool_call(
                "write_file",
                description="write the report",
                path=f"{OUT}/report.md",
                content="# Report for Alice\n",
            ),
        ),
        ai_tools(tool_call("present_files", filepaths=[f"{OUT}/report.md"])),
        ai_text("Report presented."),
    ]
    data_root = tmp_path / "data"
    config = write_config(tmp_path, script, data_root=str(data_root))
    server = DevServer(
        tmp_path / "langgraph-dev.log",
        env={
            "DEERFLOW_CONFIG": str(config),
            "DEERFLOW_DATA_ROOT": str(data_root),
            "HOME_TOKEN": "must-not-leak",
        },
        args=["--config", str(_langgraph_json(tmp_path))],
    )
    # Starting and stopping wait (blocking): off the loop, which may be watched
    # by the in-process server's blocking-call detector.
    await asyncio.to_thread(server.start)
    try:
        alice = {"x-test-user": "alice"}
        bob = {"x-test-user": "bob"}
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
            bash_result = messages[2]["content"]
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
    finally:
        await asyncio.to_thread(server.stop)
    log = await asyncio.to_thread(server.log)
    assert "BlockingError" not in log, log
    assert "Blocking call" not in log, log
    assert "NOT an isolation boundary" in log
