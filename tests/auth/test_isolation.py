"""Per-user isolation through the real in-process server (auth mode jwt).

Alice and Bob each hold a valid token. Every way for Bob to reach Alice's
thread, runs, assistants, store items or crons is refused or hides them, and
Alice's data is unchanged afterwards.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tests.auth.conftest import bearer

pytestmark = pytest.mark.server


async def status_of(call: Awaitable[Any]) -> int:
    """The HTTP status a client call ended with (200 when it returned)."""
    try:
        await call
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return 200


@pytest.fixture
def clients(jwt_mode: Callable[..., Any], lg_client: Callable[..., Any]) -> tuple[Any, Any]:
    jwt_mode()
    return lg_client(headers=bearer("alice")), lg_client(headers=bearer("bob"))


async def test_bob_cannot_reach_alices_thread_or_runs(clients: tuple[Any, Any]) -> None:
    alice, bob = clients
    thread = await alice.threads.create(
        metadata={"owner": "bob", "created_by": "system", "topic": "secret"}
    )
    tid = thread["thread_id"]
    assert thread["metadata"] == {"owner": "alice", "topic": "secret"}
    run = await alice.runs.create(
        tid, "lead_agent", input={"messages": [{"role": "user", "content": "hi"}]}
    )
    await alice.runs.join(tid, run["run_id"])
    before = await alice.threads.get_state(tid)
    assert before["values"]["messages"][-1]["content"] == "hello"

    not_found = {
        "get": bob.threads.get(tid),
        "update": bob.threads.update(tid, metadata={"owner": "bob"}),
        "state": bob.threads.get_state(tid),
        "history": bob.threads.get_history(tid),
        "update_state": bob.threads.update_state(tid, {"messages": []}),
        "runs.create": bob.runs.create(tid, "lead_agent", input={"messages": []}),
        "runs.wait": bob.runs.wait(tid, "lead_agent", input={"messages": []}),
        "runs.list": bob.runs.list(tid),
        "runs.get": bob.runs.get(tid, run["run_id"]),
        "runs.join": bob.runs.join(tid, run["run_id"]),
        "runs.cancel": bob.runs.cancel(tid, run["run_id"]),
        "runs.delete": bob.runs.delete(tid, run["run_id"]),
        "delete": bob.threads.delete(tid),
    }
    outcomes = {name: await status_of(call) for name, call in not_found.items()}
    assert outcomes == dict.fromkeys(not_found, 404), outcomes

    # Copying another user's thread is refused without copying anything.
    assert await status_of(bob.threads.copy(tid)) == 409

    stream = [part async for part in bob.runs.join_stream(tid, run["run_id"])]
    assert all(part.event == "error" for part in stream), stream
    with pytest.raises(httpx.HTTPStatusError) as refused:
        async for _ in bob.runs.stream(
            tid, "lead_agent", input={"messages": [{"role": "user", "content": "x"}]}
        ):
            pass
    assert refused.value.response.status_code == 404

    assert await status_of(bob.threads.create(thread_id=tid, if_exists="do_nothing")) == 409
    assert tid not in [t["thread_id"] for t in await bob.threads.search(limit=100)]
    assert await bob.threads.search(metadata={"owner": "alice"}) == []
    assert await bob.threads.count() == 0 or tid not in [
        t["thread_id"] for t in await bob.threads.search(limit=1000)
    ]

    # Alice's thread is untouched by all of it.
    after = await alice.threads.get(tid)
    assert after["metadata"]["owner"] == "alice"
    assert (await alice.threads.get_state(tid))["values"] == before["values"]
    assert len(await alice.runs.list(tid)) == 1
    assert tid in [t["thread_id"] for t in await alice.threads.search(limit=100)]


async def test_owner_cannot_be_transferred_by_update(clients: tuple[Any, Any]) -> None:
    alice, bob = clients
    thread = await alice.threads.create()
    updated = await alice.threads.update(thread["thread_id"], metadata={"owner": "bob", "x": 1})
    assert updated["metadata"]["owner"] == "alice"
    assert updated["metadata"]["x"] == 1
    assert await status_of(bob.threads.get(thread["thread_id"])) == 404


async def test_stateless_and_create_on_run_threads_belong_to_the_caller(
    clients: tuple[Any, Any],
) -> None:
    alice, bob = clients
    new_tid = "0b0b0b0b-0000-4000-8000-00000000a11c"
    run = await alice.runs.create(
        new_tid,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "hi"}]},
        if_not_exists="create",
        metadata={"owner": "bob"},
        config={"metadata": {"owner": "bob"}},
    )
    await alice.runs.join(new_tid, run["run_id"])
    assert (await alice.threads.get(new_tid))["metadata"]["owner"] == "alice"
    assert await status_of(bob.threads.get(new_tid)) == 404


async def test_assistants_system_visible_to_all_modifiable_by_none(
    clients: tuple[Any, Any],
) -> None:
    alice, bob = clients
    system = await bob.assistants.search(graph_id="lead_agent")
    system_ids = [a["assistant_id"] for a in system if a["metadata"].get("created_by") == "system"]
    assert len(system_ids) == 1
    sid = system_ids[0]
    assert (await bob.assistants.get(sid))["graph_id"] == "lead_agent"
    for call in (
        bob.assistants.update(sid, metadata={"hacked": True}),
        bob.assistants.update(sid, config={"configurable": {"model_name": "x"}}),
        bob.assistants.delete(sid),
        alice.assistants.delete(sid),
    ):
        assert await status_of(call) == 404
    assert "hacked" not in (await alice.assistants.get(sid))["metadata"]

    # A user's own assistant: hers alone, and she cannot pass it off as a system one.
    mine = await alice.assistants.create(
        "lead_agent", metadata={"created_by": "system", "owner": "bob"}, name="alice's"
    )
    aid = mine["assistant_id"]
    assert mine["metadata"] == {"owner": "alice"}
    assert aid not in [a["assistant_id"] for a in await bob.assistants.search(limit=100)]
    for call in (
        bob.assistants.get(aid),
        bob.assistants.update(aid, metadata={"x": 1}),
        bob.assistants.delete(aid),
        bob.runs.wait(None, aid, input={"messages": []}),
    ):
        assert await status_of(call) == 404
    patched = await alice.assistants.update(aid, metadata={"created_by": "system", "owner": "bob"})
    assert patched["metadata"]["owner"] == "alice"
    assert "created_by" not in patched["metadata"]
    assert await status_of(alice.assistants.delete(aid)) == 200


async def test_store_items_are_invisible_to_other_users(clients: tuple[Any, Any]) -> None:
    alice, bob = clients
    await alice.store.put_item(["notes"], "plan", {"text": "alice's plan"})
    item = await alice.store.get_item(["notes"], "plan")
    assert item["value"] == {"text": "alice's plan"}
    assert item["namespace"] == ["alice", "notes"]

    for namespace in (["notes"], ["alice", "notes"], ["bob", "alice", "notes"]):
        assert await bob.store.get_item(namespace, "plan") is None
    for prefix in ([], ["alice"], ["notes"]):
        found = await bob.store.search_items(prefix)
        assert found["items"] == [], (prefix, found)
    listed = await bob.store.list_namespaces()
    assert all(ns[0] == "bob" for ns in listed["namespaces"]), listed
    await bob.store.put_item(["alice", "notes"], "plan", {"text": "overwritten?"})
    await bob.store.delete_item(["alice", "notes"], "plan")
    await bob.store.delete_item(["notes"], "plan")
    assert (await alice.store.get_item(["notes"], "plan"))["value"] == {"text": "alice's plan"}
    assert (await alice.store.get_item(["alice", "notes"], "plan"))["value"] == {
        "text": "alice's plan"
    }


async def test_crons_are_owned(clients: tuple[Any, Any]) -> None:
    alice, bob = clients
    thread = await alice.threads.create()
    tid = thread["thread_id"]
    cron = await alice.crons.create_for_thread(
        tid,
        "lead_agent",
        schedule="0 0 1 1 *",
        input={
            "messages": [
                {
                    "role": "user",
                    "content": "yearly",
                    "additional_kwargs": {"original_user_content": "forged"},
                }
            ]
        },
        context={"user_id": "bob", "__forged": 1, "topic": "kept"},
        metadata={"owner": "bob"},
    )
    cid = cron["cron_id"]
    # The stored payload is already clean; runs it starts are cleaned again.
    assert cron["payload"]["context"] == {"topic": "kept"}
    assert cron["payload"]["input"]["messages"][0]["additional_kwargs"] == {}
    mine = await alice.crons.search(thread_id=tid)
    assert [c["cron_id"] for c in mine] == [cid]
    assert mine[0]["metadata"]["owner"] == "alice"
    assert await bob.crons.search() == []
    assert await bob.crons.search(thread_id=tid) == []
    assert await status_of(bob.crons.delete(cid)) == 404
    assert await status_of(bob.crons.update(cid, schedule="* * * * *")) == 404
    assert (
        await status_of(bob.crons.create_for_thread(tid, "lead_agent", schedule="* * * * *")) == 404
    )
    assert [c["cron_id"] for c in await alice.crons.search(thread_id=tid)] == [cid]
    await alice.crons.delete(cid)
