"""Per-user cap on active runs: one user cannot fill the server's queue for everyone.

Why: the server's job queue is shared. Ten queued runs from one user delayed
another user's trivial run by 14 s in a red-team pass. ``runs.max_active_per_user``
caps how many runs (``pending`` + ``running``) one owner may have at once; the
next run creation answers 429 with ``Retry-After``.

How it counts: from the server's own records, not a process-local counter, so
it is right with many replicas and after restarts, and a run that ends (success,
error, cancel, timeout) stops counting by itself. Inside the ``create_run``
authorization handler it asks the server's API in-process (the SDK's loopback
client, ``get_client(url=None)``, which the server wires to its own app and
which skips authorization): the owner's ``busy`` threads
(``metadata.owner``; every run's thread carries its owner, stateless runs'
temporary threads included), then each one's pending and running runs. The
check happens before the run is stored, so simultaneous creations may each
see room: a burst can overshoot the cap by the number of requests in flight
at that instant (there is no lock across replicas); sustained overuse cannot.

Runs a subagent delegation token starts are not capped: their parent run is
already counted, and refusing them would fail the parent's ``task`` call.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from langgraph_sdk import Auth

from auth.access import OWNER_KEY, Caller

__all__ = ["RETRY_AFTER_SECONDS", "count_active_runs", "enforce_run_cap"]

logger = logging.getLogger("deerflow.auth")

RETRY_AFTER_SECONDS = 5
_ACTIVE = ("pending", "running")


_local = threading.local()


def _loopback_client() -> Any:
    """One loopback client per OS thread (the server runs event loops on several)."""
    client = getattr(_local, "client", None)
    if client is None:
        from langgraph_sdk import get_client

        client = _local.client = get_client(url=None)
    return client


async def count_active_runs(owner: str, *, limit: int, client: Any | None = None) -> int:
    """Pending + running runs of ``owner``, counted up to ``limit`` (enough to decide)."""
    client = client or _loopback_client()
    threads = await client.threads.search(
        metadata={OWNER_KEY: owner}, status="busy", limit=limit + 1, select=["thread_id"]
    )
    count = 0
    for thread in threads:
        for status in _ACTIVE:
            runs = await client.runs.list(
                thread["thread_id"], status=status, limit=limit + 1, select=["run_id"]
            )
            count += len(runs)
        if count >= limit:
            break
    return count


async def enforce_run_cap(caller: Caller, cap: int) -> None:
    """429 when ``caller`` already has ``cap`` active runs (``cap`` 0: no cap)."""
    if cap <= 0 or caller.delegated:
        return
    try:
        active = await count_active_runs(caller.principal, limit=cap)
    except Exception:
        # The count is a fairness guard, not an access rule: never refuse a run
        # because it could not be taken, but say so.
        logger.exception("could not count active runs of %s; run admitted", caller.principal)
        return
    if active >= cap:
        raise Auth.exceptions.HTTPException(
            status_code=429,
            detail=(
                f"too many active runs: {active} pending or running, the limit per user is "
                f"{cap} (runs.max_active_per_user); wait for one to finish"
            ),
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
