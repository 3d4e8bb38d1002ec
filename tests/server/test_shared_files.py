"""Two server replicas share the thread file store (issue 20 item 1, acceptance).

Two ``langgraph dev`` processes stand for two API replicas: same config, the
same Postgres database for checkpoints (as in production), and
``files.backend: shared`` on one data root (the ReadWriteMany volume in
``deploy/``). An upload received by replica A is seen by a run on replica B,
and what that run presented downloads from replica A.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.api_keys import hash_api_key
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.support.server import DevServer

pytestmark = pytest.mark.blackbox

OUT = "/mnt/user-data/outputs"
KEY = "dfk_alice-shared-files-0123456789"
BOB_KEY = "dfk_bob-shared-files-0123456789"


async def test_upload_on_one_replica_is_seen_by_a_run_and_a_download_on_another(
    tmp_path: Path, dev_server: Callable[..., DevServer], postgres_uri: str
) -> None:
    script = [
        ai_tools(
            tool_call(
                "bash",
                description="copy the upload into the outputs",
                command=f"cp /mnt/user-data/uploads/notes.txt {OUT}/copy.txt",
            )
        ),
        ai_tools(tool_call("present_files", filepaths=[f"{OUT}/copy.txt"])),
        ai_text("Copied."),
    ]
    shared = tmp_path / "shared-volume"
    await asyncio.to_thread(shared.mkdir)
    auth: dict[str, Any] = {
        "mode": "api_key",
        "api_keys": [
            {"identity": "alice", "sha256": hash_api_key(KEY)},
            {"identity": "bob", "sha256": hash_api_key(BOB_KEY)},
        ],
    }
    config = write_config(
        tmp_path, script, data_root=str(shared), auth=auth, files={"backend": "shared"}
    )
    env = {
        "DEERFLOW_CONFIG": str(config),
        "DEERFLOW_DATA_ROOT": str(shared),
        "DEERFLOW_POSTGRES_URI": postgres_uri,
    }
    replica_a = dev_server(env=env)
    replica_b = dev_server(env=env)
    headers = {"x-api-key": KEY}
    thread_id = str(uuid.uuid4())
    async with (
        httpx.AsyncClient(base_url=replica_a.url, timeout=60, headers=headers) as a,
        httpx.AsyncClient(base_url=replica_b.url, timeout=60, headers=headers) as b,
    ):
        # Thread metadata lives in each dev server's own memory; the licensed
        # runtime keeps it in Postgres. Create the same thread on both (with the
        # graph it belongs to, which the in-memory runtime needs to read its state).
        body = {"thread_id": thread_id, "metadata": {"graph_id": "lead_agent"}}
        for client in (a, b):
            created = await client.post("/threads", json=body)
            assert created.status_code == 200, created.text

        files = {"files": ("notes.txt", b"shared across replicas\n", "text/plain")}
        uploaded = await a.post(f"/threads/{thread_id}/uploads", files=files)
        assert uploaded.status_code == 201, uploaded.text
        listing = (await b.get(f"/threads/{thread_id}/uploads")).json()["files"]
        assert [f["filename"] for f in listing] == ["notes.txt"]

        message = {
            "role": "user",
            "content": "Copy my notes.",
            "additional_kwargs": {"files": [{"filename": "notes.txt"}]},
        }
        run = await b.post(
            f"/threads/{thread_id}/runs/wait",
            json={"assistant_id": "lead_agent", "input": {"messages": [message]}},
        )
        assert run.status_code == 200, run.text
        values = run.json()
        assert values["artifacts"] == [f"{OUT}/copy.txt"]
        human = values["messages"][0]
        assert "notes.txt (23 B) at /mnt/user-data/uploads/notes.txt" in human["content"]
        assert "not found" not in human["content"]

        download = await a.get(f"/threads/{thread_id}/outputs/copy.txt")
        assert download.status_code == 200, download.text
        assert download.content == b"shared across replicas\n"

        # Deleting the thread (issue 13 item 11) removes its files for every replica;
        # another user's delete is refused and removes nothing.
        refused = await a.delete(f"/threads/{thread_id}", headers={"x-api-key": BOB_KEY})
        assert refused.status_code == 404
        assert (await b.get(f"/threads/{thread_id}/uploads")).json()["files"] != []
        deleted = await a.delete(f"/threads/{thread_id}")
        assert deleted.status_code == 204, deleted.text
        assert (await b.get(f"/threads/{thread_id}/uploads")).json()["files"] == []
        assert (
            await asyncio.to_thread(lambda: list(shared.glob(f"users/*/threads/{thread_id}"))) == []
        )

    for server in (replica_a, replica_b):
        log = await server.alog()
        assert "Blocking call" not in log
