"""The extraction queue: debounced per thread, bounded, flushed on demand, failures contained."""

from __future__ import annotations

import asyncio
import logging

import pytest

from memory.queue import MemoryJob, MemoryQueue


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def job(ran: list[str], thread: str, label: str, *, fail: bool = False) -> MemoryJob:
    async def run() -> None:
        if fail:
            raise RuntimeError("model said no")
        ran.append(label)

    return MemoryJob(user_id="u", thread_id=thread, run=run)


async def test_a_newer_job_for_the_same_thread_replaces_the_pending_one() -> None:
    ran: list[str] = []
    queue = MemoryQueue(debounce_seconds=3600, clock=Clock())
    queue.submit(job(ran, "t1", "first"))
    queue.submit(job(ran, "t1", "second"))
    queue.submit(job(ran, "t2", "other"))
    assert queue.pending == 2
    await asyncio.sleep(0)
    assert ran == []  # still debouncing
    await queue.flush()
    assert sorted(ran) == ["other", "second"]
    await queue.drain()


async def test_due_jobs_run_in_the_background_without_a_flush() -> None:
    ran: list[str] = []
    queue = MemoryQueue(debounce_seconds=0)
    queue.submit(job(ran, "t1", "now"))
    for _ in range(100):
        if ran:
            break
        await asyncio.sleep(0.01)
    assert ran == ["now"]
    await queue.drain()


async def test_the_queue_is_bounded_and_drops_the_oldest(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []
    queue = MemoryQueue(debounce_seconds=3600, max_pending=2, clock=Clock())
    for thread in ("a", "b", "c"):
        queue.submit(job(ran, thread, thread))
    assert queue.pending == 2 and queue.dropped == 1
    assert "memory queue full" in caplog.text
    await queue.flush()
    assert sorted(ran) == ["b", "c"]
    await queue.drain()


async def test_a_failing_job_is_logged_and_the_queue_keeps_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="deerflow.memory")
    ran: list[str] = []
    queue = MemoryQueue(debounce_seconds=3600, clock=Clock())
    queue.submit(job(ran, "t1", "x", fail=True))
    queue.submit(job(ran, "t2", "ok"))
    await queue.flush()
    assert ran == ["ok"] and queue.failed == 1 and queue.completed == 1
    assert "model said no" in caplog.text and "memory unchanged" in caplog.text
    await queue.drain()
