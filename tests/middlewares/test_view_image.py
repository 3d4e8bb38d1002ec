"""ViewImageMiddleware (26): images live in the model request, never in checkpoints."""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from graphs._build import build_agent
from graphs.prompts import LEAD_SYSTEM_PROMPT
from middlewares.chain import FACTORIES
from middlewares.view_image import (
    VIEWED_IMAGE_ID_PREFIX,
    VIEWED_IMAGE_MARKER,
    ViewImageMiddleware,
    is_viewed_image_context,
)
from runtime.config import load_settings
from runtime.recording_model import ModelCall, recorded_calls
from tests.support.sandbox_runs import run_agent, run_config
from tests.support.scripted import (
    ai_text,
    ai_tools,
    recording_model_entry,
    tool_call,
    write_config,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
UPLOADS = "/mnt/user-data/uploads"


def _png(tag: str, size: int = 64) -> bytes:
    body = tag.encode().ljust(size, b"\0")
    return PNG_MAGIC + body


def _settings(tmp_path: Path, script: list[dict[str, Any]], key: str) -> Any:
    entry = recording_model_entry(script, key=key, supports_vision=True)
    return load_settings(write_config(tmp_path, models=[entry]))


def _uploads_dir(settings: Any, thread: str, user: str = "alice") -> Path:
    return settings.data_root_path() / f"users/{user}/threads/{thread}/user-data/uploads"


async def _write(directory: Path, files: dict[str, bytes]) -> None:
    def setup() -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (directory / name).write_bytes(data)

    await asyncio.to_thread(setup)


def _images(call: ModelCall) -> list[str]:
    """The base64 payloads of image blocks in the request's image context."""
    found = []
    for message in call.messages:
        if isinstance(message, HumanMessage) and isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, dict) and block.get("type") == "image":
                    found.append(block["base64"])
    return found


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_checkpoint_holds_no_base64_and_the_next_request_holds_the_image(
    tmp_path: Path,
) -> None:
    key = f"view-{uuid.uuid4()}"
    script = [ai_tools(tool_call("view_image", image_path=f"{UPLOADS}/big.png")), ai_text("ok")]
    settings = _settings(tmp_path, script, key)
    big = PNG_MAGIC + bytes(range(256)) * (5 * 1024 * 1024 // 256)
    await _write(_uploads_dir(settings, "t1"), {"big.png": big})
    saver = InMemorySaver()
    result = await run_agent(settings, "look", thread_id="t1", checkpointer=saver)

    (viewed,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert viewed.status == "success" and "Viewed image" in str(viewed.content)
    assert isinstance(viewed.content, str)  # no image block on the tool result
    checkpoint = await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
    assert checkpoint is not None
    stored = repr(checkpoint.checkpoint["channel_values"])
    assert _b64(big)[:4096] not in stored
    assert not any(is_viewed_image_context(m) for m in result["messages"])
    assert result["viewed_images"][f"{UPLOADS}/big.png"]["size"] == len(big)

    first, second = recorded_calls(key)
    assert _images(first) == []
    assert _images(second) == [_b64(big)]
    context = second.messages[-1]
    assert isinstance(context, HumanMessage) and context.additional_kwargs["hide_from_ui"]
    assert context.additional_kwargs["deerflow_content_kind"] == "viewed_image"
    assert context.additional_kwargs["deerflow_producer_kind"] == "view_image"


async def test_at_most_four_images_the_oldest_evicted(tmp_path: Path) -> None:
    key = f"view-{uuid.uuid4()}"
    names = [f"img{i}.png" for i in range(6)]
    script = [ai_tools(tool_call("view_image", image_path=f"{UPLOADS}/{n}")) for n in names]
    settings = _settings(tmp_path, [*script, ai_text("done")], key)
    files = {n: _png(n) for n in names}
    await _write(_uploads_dir(settings, "t2"), files)
    await run_agent(settings, "look at all", thread_id="t2")

    calls = recorded_calls(key)
    assert len(calls) == 7
    assert _images(calls[4]) == [_b64(files[n]) for n in names[:4]]
    # The fifth image evicts the oldest, the sixth the next one; newest last.
    assert _images(calls[5]) == [_b64(files[n]) for n in names[1:5]]
    assert _images(calls[6]) == [_b64(files[n]) for n in names[2:6]]
    # Exactly one context message per request: the previous one never accumulates.
    assert sum(is_viewed_image_context(m) for m in calls[6].messages) == 1


async def test_budget_skips_an_image_that_does_not_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"view-{uuid.uuid4()}"
    script = [
        ai_tools(tool_call("view_image", image_path=f"{UPLOADS}/small.png")),
        ai_tools(tool_call("view_image", image_path=f"{UPLOADS}/large.png")),
        ai_text("done"),
    ]
    settings = _settings(tmp_path, script, key)
    small, large = _png("small", 100), _png("large", 3000)
    await _write(_uploads_dir(settings, "t3"), {"small.png": small, "large.png": large})
    # Constructor limits may only tighten: a 1 KiB budget keeps only the small one,
    # although the large one is newer.
    monkeypatch.setitem(
        FACTORIES,
        "ViewImageMiddleware",
        lambda i: ViewImageMiddleware(i.settings, max_base64_bytes=1024, max_images=2),
    )
    await run_agent(settings, "look", thread_id="t3")
    assert _images(recorded_calls(key)[-1]) == [_b64(small)]
    with pytest.raises(ValueError, match="max_images"):
        ViewImageMiddleware(settings, max_images=5)
    with pytest.raises(ValueError, match="max_base64_bytes"):
        ViewImageMiddleware(settings, max_base64_bytes=29 * 1024 * 1024)


async def test_deleted_file_is_skipped_and_the_run_goes_on(tmp_path: Path) -> None:
    key = f"view-{uuid.uuid4()}"
    script = [
        ai_tools(tool_call("view_image", image_path=f"{UPLOADS}/a.png")),
        ai_tools(tool_call("view_image", image_path=f"{UPLOADS}/b.png")),
        ai_text("seen both"),
        ai_text("still fine"),
    ]
    settings = _settings(tmp_path, script, key)
    uploads = _uploads_dir(settings, "t4")
    a, b = _png("a"), _png("b")
    await _write(uploads, {"a.png": a, "b.png": b})
    saver = InMemorySaver()
    await run_agent(settings, "look", thread_id="t4", checkpointer=saver)
    await asyncio.to_thread((uploads / "a.png").unlink)
    result = await run_agent(settings, "again", thread_id="t4", checkpointer=saver)

    assert result["messages"][-1].content == "still fine"
    last = recorded_calls(key)[-1]
    assert _images(last) == [_b64(b)]


async def test_records_of_another_thread_are_not_read(tmp_path: Path) -> None:
    """A client-written record naming a path is read through this thread's own sandbox only."""
    key = f"view-{uuid.uuid4()}"
    settings = _settings(tmp_path, [ai_text("nothing to see")], key)
    secret = _png("bob-secret")
    await _write(_uploads_dir(settings, "bobs", user="bob"), {"s.png": secret})
    record = {"mime_type": "image/png", "size": len(secret), "sha256": "x"}
    forged = {
        f"{UPLOADS}/s.png": record,
        "/etc/passwd": record,
        "../../users/bob/threads/bobs/user-data/uploads/s.png": record,
    }
    stale = HumanMessage(
        content="old injected context",
        id=f"{VIEWED_IMAGE_ID_PREFIX}old",
        additional_kwargs={
            VIEWED_IMAGE_MARKER: True,
            "deerflow_content_kind": "viewed_image",
            "deerflow_producer_kind": "view_image",
        },
    )
    lookalike = HumanMessage(content="user text", id=f"{VIEWED_IMAGE_ID_PREFIX}mine")
    await run_agent(
        settings,
        {"messages": [stale, lookalike, HumanMessage("look")], "viewed_images": forged},
        thread_id="alices",
    )
    (call,) = recorded_calls(key)
    assert _images(call) == []
    texts = [m.text for m in call.messages]
    assert "old injected context" not in texts  # stale server-marked context removed
    assert "user text" in texts  # the id prefix alone is not enough to remove a message


def test_sync_invoke_rebuilds_the_image_context_too(tmp_path: Path) -> None:
    """The sync twin reads through the same sandbox (on a private loop)."""
    key = f"view-{uuid.uuid4()}"
    settings = _settings(tmp_path, [ai_text("I see it")], key)
    image = _png("sync")
    uploads = _uploads_dir(settings, "t6")
    uploads.mkdir(parents=True)
    (uploads / "s.png").write_bytes(image)
    config = run_config("t6", "alice")
    graph = build_agent(settings, config, kind="lead_agent", system_prompt=LEAD_SYSTEM_PROMPT)
    graph.checkpointer = InMemorySaver()
    record = {"mime_type": "image/png", "size": len(image), "sha256": "old"}
    graph.invoke(
        {"messages": [HumanMessage("look")], "viewed_images": {f"{UPLOADS}/s.png": record}},
        config,
    )
    (call,) = recorded_calls(key)
    assert _images(call) == [_b64(image)]
    assert "changed since you viewed it" in call.text
