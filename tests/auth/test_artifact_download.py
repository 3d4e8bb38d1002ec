"""A file an MCP tool returned is a thread artifact: its owner downloads it, others get 404.

Through the in-process LangGraph Server in auth mode ``jwt``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from middlewares.artifact_capture import ARTIFACT_DIR, artifact_handle
from tests.auth.conftest import SECRET, bearer
from tests.support.artifact_tools import BLOB
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config

pytestmark = pytest.mark.server

EXPORT = {"name": "mcp_export", "group": "test", "use": "tests.support.artifact_tools:mcp_export"}


async def test_mcp_embedded_file_is_downloadable_by_its_owner_only(
    tmp_path: Path, use_config: Any, lg_client: Any, raw: Callable[..., httpx.AsyncClient]
) -> None:
    script = [ai_tools(tool_call("mcp_export")), ai_text("exported")]
    use_config(
        write_config(
            tmp_path, script, tools=[EXPORT], auth={"mode": "jwt", "jwt": {"secret": SECRET}}
        )
    )
    alice, bob = bearer("alice"), bearer("bob")
    client = lg_client(headers=alice)
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "export"}]}
    )
    state = await client.threads.get_state(thread_id)
    digest = hashlib.sha256(BLOB).hexdigest()
    path = f"{ARTIFACT_DIR}/{digest[:12]}-data.bin"
    assert path in state["values"]["artifacts"]
    assert state["values"]["artifact_handles"][artifact_handle("blob", digest)]["path"] == path
    url = f"/threads/{thread_id}/outputs/{path.removeprefix('/mnt/user-data/outputs/')}"

    async with raw(alice) as http:
        owner = await http.get(url)
    assert owner.status_code == 200, owner.text
    assert owner.content == BLOB
    async with raw(bob) as http:
        other = await http.get(url)
    assert other.status_code == 404
    async with raw() as http:
        anonymous = await http.get(url)
    assert anonymous.status_code == 401
