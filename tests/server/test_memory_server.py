"""Long-term memory through the real in-process server (jwt mode, two users).

The extraction model is scripted (a ``MemoryUpdate`` tool call); the lead model
records every request, so what recall put into a request is read back exactly.
The tests wait for extraction with the queue's flush hook, never a sleep.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.tokens import mint_token
from memory.queue import get_memory_queue
from runtime.recording_model import recorded_calls
from tests.support.scripted import (
    ai_text,
    ai_tools,
    recording_model_entry,
    scripted_model_entry,
    tool_call,
    write_config,
)
from tests.support.server import RequestScopedASGITransport

pytestmark = pytest.mark.server

SECRET = "memory-secret-" + "m" * 40
FACT = "Favourite colour is teal"
EXTRACT = [
    {
        "tool_calls": [
            {
                "name": "MemoryUpdate",
                "args": {"add": [{"content": FACT, "category": "preference", "confidence": 0.9}]},
            }
        ]
    }
]


@pytest.fixture(autouse=True)
async def _settled_queue() -> AsyncIterator[None]:
    """Each test starts and ends with no pending extraction (the queue is per process)."""
    await get_memory_queue().flush()
    yield
    await get_memory_queue().flush()


def bearer(sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, sub)}"}


def memory_config(
    directory: Path,
    *,
    lead: list[dict[str, Any]] | None = None,
    extractor: dict[str, Any] | None = None,
    **memory: Any,
) -> tuple[Path, str]:
    key = f"memory-{uuid.uuid4().hex}"
    path = write_config(
        directory,
        models=[
            recording_model_entry(lead or [ai_text("ok")], key=key, name="lead"),
            extractor or scripted_model_entry(EXTRACT, name="extractor"),
        ],
        data_root=str(directory / "data"),
        auth={"mode": "jwt", "jwt": {"secret": SECRET}},
        # Jobs wait for the test's flush (a long debounce), so what runs when is explicit.
        memory={"enabled": True, "model": "extractor", "debounce_seconds": 3600, **memory},
    )
    return path, key


async def say(client: Any, text: str, **context: Any) -> dict[str, Any]:
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": text}]},
        context=context or None,
    )
    assert "__error__" not in result, result
    return result


def memory_blocks(call: Any) -> list[str]:
    return [
        m.text
        for m in call.messages
        if (m.additional_kwargs or {}).get("deerflow_content_kind") == "dynamic_context_memory"
    ]


def http(lg_server: Any, sub: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=RequestScopedASGITransport(app=lg_server),
        base_url="http://deerflow.test",
        headers=bearer(sub),
        timeout=30,
    )


async def test_a_fact_from_one_thread_is_recalled_in_the_next_for_its_user_only(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Any, lg_server: Any
) -> None:
    path, key = memory_config(tmp_path)
    use_config(path)
    alice, bob = lg_client(headers=bearer("alice")), lg_client(headers=bearer("bob"))

    await say(alice, "Remember: my favourite colour is teal.")
    assert memory_blocks(recorded_calls(key)[-1]) == []  # nothing known yet
    await get_memory_queue().flush()

    await say(alice, "Which colour should the slides use?")
    blocks = memory_blocks(recorded_calls(key)[-1])
    (block,) = blocks
    assert f"[preference] {FACT}" in block
    # Request-only: the recalled block is never written to the thread.
    threads = await alice.threads.search()
    for thread in threads:
        state = await alice.threads.get_state(thread["thread_id"])
        assert all(FACT not in str(m["content"]) for m in state["values"].get("messages", []))

    await say(bob, "Which colour should the slides use?")
    assert memory_blocks(recorded_calls(key)[-1]) == []
    await get_memory_queue().flush()  # Bob's run is extracted into Bob's own memory

    async with http(lg_server, "bob") as as_bob, http(lg_server, "alice") as as_alice:
        (mine,) = (await as_alice.get("/memory")).json()["memories"]  # deduplicated
        assert mine["content"] == FACT and mine["category"] == "preference"
        assert mine["source_thread"] and mine["created_at"]
        bobs = (await as_bob.get("/memory")).json()["memories"]
        assert mine["id"] not in {m["id"] for m in bobs}
        forged = await as_bob.post(
            "/store/items/search", json={"namespace_prefix": ["alice", "memories"]}
        )
        assert forged.status_code == 200
        assert mine["id"] not in {item["key"] for item in forged.json()["items"]}
        assert (await as_bob.delete(f"/memory/{mine['id']}")).status_code == 404
        assert (await as_alice.delete(f"/memory/{mine['id']}")).status_code == 204
        assert (await as_alice.get("/memory")).json() == {"memories": []}

    await say(alice, "And the title font?")
    assert memory_blocks(recorded_calls(key)[-1]) == []


async def test_delete_all_and_opting_out(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Any, lg_server: Any
) -> None:
    path, key = memory_config(tmp_path)
    use_config(path)
    carol = lg_client(headers=bearer("carol"))
    await say(carol, "I like teal.", memory_enabled=False)
    assert get_memory_queue().pending == 0  # the opted-out run queued nothing
    await get_memory_queue().flush()
    async with http(lg_server, "carol") as as_carol:
        assert (await as_carol.get("/memory")).json() == {"memories": []}  # not recorded
        await say(carol, "I like teal.")
        await get_memory_queue().flush()
        assert len((await as_carol.get("/memory")).json()["memories"]) == 1
        await say(carol, "Colours?", memory_enabled=False)
        assert memory_blocks(recorded_calls(key)[-1]) == []  # not recalled either
        assert (await as_carol.delete("/memory")).json() == {"deleted": 1}
        assert (await as_carol.get("/memory")).json() == {"memories": []}


async def test_a_failing_extraction_model_leaves_the_run_and_the_store_alone(
    tmp_path: Path,
    use_config: Callable[[Path], Path],
    lg_client: Any,
    lg_server: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="deerflow.memory")
    path, _ = memory_config(
        tmp_path,
        extractor={"name": "extractor", "use": "tests.support.subagent_tools:ExplodingChatModel"},
    )
    use_config(path)
    dave = lg_client(headers=bearer("dave"))
    result = await say(dave, "My favourite colour is teal.")
    assert result["messages"][-1]["content"] == "ok"
    await get_memory_queue().flush()
    async with http(lg_server, "dave") as as_dave:
        assert (await as_dave.get("/memory")).json() == {"memories": []}
    assert "model exploded" in caplog.text


async def test_tool_mode_saves_finds_and_deletes(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Any, lg_server: Any
) -> None:
    first = [
        ai_tools(tool_call("memory_save", content="Uses vim", category="preference")),
        ai_tools(tool_call("memory_search", query="vim")),
        ai_text("saved"),
    ]
    path, key = memory_config(tmp_path, lead=first, mode="tool")
    use_config(path)
    erin = lg_client(headers=bearer("erin"))
    thread = await erin.threads.create()
    tid = thread["thread_id"]
    await erin.runs.wait(
        tid, "lead_agent", input={"messages": [{"role": "user", "content": "remember vim"}]}
    )
    assert {"memory_save", "memory_search", "memory_delete"} <= set(recorded_calls(key)[0].tools)
    state = await erin.threads.get_state(tid)
    tools = [m for m in state["values"]["messages"] if m["type"] == "tool"]
    assert tools[0]["content"].startswith("Saved memory ")
    memory_id = tools[0]["content"].removeprefix("Saved memory ").rstrip(".")
    assert f"{memory_id} [preference] Uses vim" in tools[1]["content"]
    assert get_memory_queue().pending == 0  # tool mode does not extract in the background

    # The same thread goes on with a script that knows the id now.
    second, _ = memory_config(
        tmp_path,
        lead=[*first, ai_tools(tool_call("memory_delete", memory_id=memory_id)), ai_text("gone")],
        mode="tool",
    )
    use_config(second)
    await erin.runs.wait(
        tid, "lead_agent", input={"messages": [{"role": "user", "content": "forget it"}]}
    )
    state = await erin.threads.get_state(tid)
    assert state["values"]["messages"][-2]["content"] == f"Deleted memory {memory_id}."
    async with http(lg_server, "erin") as as_erin:
        assert (await as_erin.get("/memory")).json() == {"memories": []}
