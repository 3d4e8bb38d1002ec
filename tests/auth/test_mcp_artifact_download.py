"""A file a real MCP server returns as an embedded resource becomes a thread artifact.

The lead calls the tests' FastMCP server (stdio) through the MCP tool layer; the
tool emits its resources in the artifact contract, ArtifactCaptureMiddleware
saves the file, and only its owner can download it (in-process server, jwt).
"""

from __future__ import annotations

import base64
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from middlewares.artifact_capture import ARTIFACT_DIR
from tests.auth.conftest import SECRET, bearer
from tests.support.mcp_server import PNG
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config
from tests.tools.test_mcp import SERVER

pytestmark = pytest.mark.server


async def test_an_mcp_embedded_file_is_an_artifact_its_owner_alone_downloads(
    tmp_path: Path, use_config: Any, lg_client: Any, raw: Callable[..., httpx.AsyncClient]
) -> None:
    use_config(
        write_config(
            tmp_path,
            [ai_tools(tool_call("report")), ai_text("reported")],
            data_root=str(tmp_path / "data"),
            auth={"mode": "jwt", "jwt": {"secret": SECRET}},
            mcp_servers={"reports": {"command": sys.executable, "args": [SERVER]}},
        )
    )
    client = lg_client(headers=bearer("alice"))
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "report"}]}
    )
    state = await client.threads.get_state(thread_id)
    blob = base64.b64decode(PNG)
    path = f"{ARTIFACT_DIR}/{hashlib.sha256(blob).hexdigest()[:12]}-data.bin"
    assert path in state["values"]["artifacts"]
    links = [h for h in state["values"]["artifact_handles"].values() if h["kind"] == "link"]
    assert [link["uri"] for link in links] == ["file:///reports/q3.pdf"]
    tool = next(m for m in state["values"]["messages"] if m["type"] == "tool")
    assert "iVBOR" not in str(tool)  # no base64 left in the checkpoint

    url = f"/threads/{thread_id}/outputs/{path.removeprefix('/mnt/user-data/outputs/')}"
    async with raw(bearer("alice")) as http:
        owner = await http.get(url)
    assert owner.status_code == 200 and owner.content == blob
    async with raw(bearer("bob")) as http:
        assert (await http.get(url)).status_code == 404
