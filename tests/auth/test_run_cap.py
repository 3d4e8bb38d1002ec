"""Per-user cap on active runs (issue 13 item 8), through the real server.

Alice's runs are held ``pending`` with ``after_seconds`` (queued, exactly the
state that starved other users); the cap counts them from the server's own
records, so cancelling one frees a slot at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from auth.run_cap import RETRY_AFTER_SECONDS, count_active_runs
from tests.auth.conftest import SECRET, bearer
from tests.support.scripted import ai_text, write_config

pytestmark = pytest.mark.server

CAP = 2
HI = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def capped(tmp_path: Path, use_config: Callable[[Path], Path]) -> Callable[[int], None]:
    def apply(cap: int) -> None:
        use_config(
            write_config(
                tmp_path,
                [ai_text("hello")],
                auth={"mode": "jwt", "jwt": {"secret": SECRET}},
                runs={"max_active_per_user": cap},
            )
        )

    return apply


async def test_the_next_run_over_the_cap_gets_429_while_another_user_starts_at_once(
    capped: Callable[[int], None],
    lg_client: Callable[..., Any],
    raw: Callable[..., httpx.AsyncClient],
    lg_server: Any,
) -> None:
    capped(CAP)
    # Fresh identities: the session's server keeps other tests' runs.
    name, other_user = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    alice, bob = lg_client(headers=bearer(name)), lg_client(headers=bearer(other_user))
    queued = (await alice.threads.create())["thread_id"]
    held = [
        await alice.runs.create(
            queued, "lead_agent", input=HI, after_seconds=600, multitask_strategy="enqueue"
        )
        for _ in range(CAP)
    ]
    # Two runs on one thread count as two: the cap is on runs, not threads.
    assert await count_active_runs(name, limit=10, client=_loopback(lg_server)) == CAP
    other = (await alice.threads.create())["thread_id"]
    async with raw(bearer(name)) as http:
        for path, body in (
            (f"/threads/{other}/runs", {"assistant_id": "lead_agent", "input": HI}),
            (f"/threads/{other}/runs/wait", {"assistant_id": "lead_agent", "input": HI}),
            ("/runs/wait", {"assistant_id": "lead_agent", "input": HI}),
            ("/runs/batch", [{"assistant_id": "lead_agent", "input": HI}]),
        ):
            refused = await http.post(path, json=body)
            assert refused.status_code == 429, (path, refused.text)
            assert "runs.max_active_per_user" in refused.json()["detail"]
            assert refused.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    assert await alice.runs.list(other) == []
    # Bob is not affected by Alice's queue.
    bobs = (await bob.threads.create())["thread_id"]
    result = await bob.runs.wait(bobs, "lead_agent", input=HI)
    assert result["messages"][-1]["content"] == "hello"
    # A run that ends stops counting: cancel one and Alice may start again.
    await alice.runs.cancel(queued, held[0]["run_id"], wait=True)
    done = await alice.runs.wait(other, "lead_agent", input=HI)
    assert done["messages"][-1]["content"] == "hello"
    await alice.runs.cancel(queued, held[1]["run_id"], wait=True)
    assert await count_active_runs(name, limit=10, client=_loopback(lg_server)) == 0


async def test_cap_zero_turns_it_off(
    capped: Callable[[int], None], lg_client: Callable[..., Any]
) -> None:
    capped(0)
    alice = lg_client(headers=bearer(f"alice-{uuid.uuid4().hex[:8]}"))
    thread = (await alice.threads.create())["thread_id"]
    held = [
        await alice.runs.create(
            thread, "lead_agent", input=HI, after_seconds=600, multitask_strategy="enqueue"
        )
        for _ in range(3)
    ]
    for run in held:
        await alice.runs.cancel(thread, run["run_id"], wait=True)


def _loopback(app: Any) -> Any:
    """The server's own API without authorization, as the handler's loopback client."""
    from langgraph_sdk.client import LangGraphClient

    from tests.support.server import RequestScopedASGITransport

    http = httpx.AsyncClient(
        transport=RequestScopedASGITransport(app=app, root_path="/noauth"),
        base_url="http://deerflow.test",
    )
    return LangGraphClient(http)
