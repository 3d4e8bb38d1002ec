"""view_image through the real LangGraph Server: the model sees the image, the thread does not."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import HumanMessage

from runtime.recording_model import recorded_calls
from tests.support.scripted import (
    ai_text,
    ai_tools,
    recording_model_entry,
    tool_call,
    write_config,
)
from tests.support.server import RequestScopedASGITransport

pytestmark = pytest.mark.server

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 400


@pytest.fixture
async def http(lg_server: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=RequestScopedASGITransport(app=lg_server),
        base_url="http://deerflow.test",
        timeout=60,
    ) as client:
        yield client


async def test_viewed_image_reaches_the_vision_model_but_not_the_thread_state(
    tmp_path: Path, use_config: Any, lg_client: Any, http: httpx.AsyncClient
) -> None:
    key = f"view-server-{uuid.uuid4()}"
    script = [
        ai_tools(tool_call("view_image", image_path="/mnt/user-data/uploads/chart.png")),
        ai_text("A chart."),
    ]
    entry = recording_model_entry(script, key=key, supports_vision=True)
    use_config(write_config(tmp_path, models=[entry]))
    thread_id = (await lg_client().threads.create())["thread_id"]
    uploaded = await http.post(
        f"/threads/{thread_id}/uploads", files=[("files", ("chart.png", PNG, "image/png"))]
    )
    assert uploaded.status_code == 201, uploaded.text

    result = await lg_client().runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "look"}]}
    )
    assert result["messages"][-1]["content"] == "A chart."
    encoded = base64.b64encode(PNG).decode()
    state = await lg_client().threads.get_state(thread_id)
    assert encoded[:2048] not in json.dumps(state["values"])
    assert state["values"]["viewed_images"]["/mnt/user-data/uploads/chart.png"]["size"] == len(PNG)
    history = await lg_client().threads.get_history(thread_id)
    assert all(encoded[:2048] not in json.dumps(h["values"]) for h in history)

    first, second = recorded_calls(key)
    blocks = [
        block
        for message in second.messages
        if isinstance(message, HumanMessage) and isinstance(message.content, list)
        for block in message.content
        if isinstance(block, dict) and block.get("type") == "image"
    ]
    assert blocks == [{"type": "image", "base64": encoded, "mime_type": "image/png"}]
    assert encoded not in first.text
