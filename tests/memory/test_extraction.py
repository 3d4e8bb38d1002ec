"""Extraction with a real (scripted) chat model and structured output, against a real store."""

from __future__ import annotations

from typing import Any

from langgraph.store.memory import InMemoryStore

from memory.extraction import extract_memories
from memory.records import add_memory, list_memories
from middlewares.pii_redaction import redact_text
from runtime.scripted_model import ScriptedChatModel

TURNS = [("user", "I'm Alice; my favourite colour is teal."), ("assistant", "Noted!")]


def extractor(args: dict[str, Any] | None = None, *, text: str | None = None) -> ScriptedChatModel:
    turn: dict[str, Any] = (
        {"content": text}
        if text is not None
        else {"tool_calls": [{"name": "MemoryUpdate", "args": args}]}
    )
    return ScriptedChatModel.model_validate({"script": [turn]})


async def run(model: ScriptedChatModel, store: InMemoryStore, **kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "thread_id": "t1",
        "max_chars": 60,
        "max_memories": 100,
        "indexed": False,
    }
    options.update(kwargs)
    return await extract_memories(model, store, "alice", TURNS, **options)


async def test_additions_updates_and_removals_are_applied() -> None:
    store = InMemoryStore()
    old = await add_memory(store, "alice", "Favourite colour is red")
    gone = await add_memory(store, "alice", "Lives in Paris")
    result = await run(
        extractor(
            {
                "add": [{"content": "Name is Alice", "category": "fact", "confidence": 0.9}],
                "update": [{"id": old, "content": "Favourite colour is teal"}],
                "remove": [gone],
            }
        ),
        store,
    )
    assert (result.added, result.updated, result.removed, result.error) == (1, 1, 1, None)
    contents = sorted(m.content for m in await list_memories(store, "alice"))
    assert contents == ["Favourite colour is teal", "Name is Alice"]
    added = next(m for m in await list_memories(store, "alice") if m.content == "Name is Alice")
    assert added.source_thread == "t1" and added.category == "fact"


async def test_garbage_or_failure_changes_nothing() -> None:
    store = InMemoryStore()
    await add_memory(store, "alice", "Keeps this")
    prose = await run(extractor(text="I think you like teal."), store)
    assert prose.error and "not a MemoryUpdate" in prose.error
    bad_args = await run(extractor({"add": "not a list"}), store)
    assert bad_args.error
    assert [m.content for m in await list_memories(store, "alice")] == ["Keeps this"]


async def test_ids_of_other_users_are_ignored_and_text_is_trimmed_and_redacted() -> None:
    store = InMemoryStore()
    bobs = await add_memory(store, "bob", "Bob's secret")
    result = await run(
        extractor(
            {
                "add": [{"content": "Email is alice@example.com and " + "x" * 200}],
                "update": [{"id": bobs, "content": "overwritten"}],
                "remove": [bobs],
            }
        ),
        store,
        redact=redact_text,
    )
    assert (result.added, result.updated, result.removed) == (1, 0, 0)
    (saved,) = await list_memories(store, "alice")
    assert "alice@example.com" not in saved.content and len(saved.content) <= 60 + 20
    assert [m.content for m in await list_memories(store, "bob")] == ["Bob's secret"]
