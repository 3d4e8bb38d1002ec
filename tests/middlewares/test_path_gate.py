"""The per-(scope, path) gate: threads, tasks, several loops, cancellation."""

from __future__ import annotations

import asyncio
import threading

import pytest

from middlewares._path_gate import PathGate, _await_off_thread, gate_for


async def _queued(gate: PathGate) -> None:
    """Wait until someone is queued on ``gate`` (a waiter on another thread or loop)."""
    for _ in range(10_000):
        if gate._waiters:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("nobody queued on the gate")


def test_gate_for_is_shared_per_key_and_distinct_across_keys() -> None:
    gate = gate_for("u/t1", "/mnt/user-data/workspace/a")
    assert gate_for("u/t1", "/mnt/user-data/workspace/a") is gate
    assert gate_for("u/t2", "/mnt/user-data/workspace/a") is not gate
    assert gate_for("u/t1", "/mnt/user-data/workspace/b") is not gate


def test_threads_are_mutually_exclusive_and_served_in_order() -> None:
    gate = PathGate()
    inside = 0
    overlap = False
    order: list[int] = []
    lock = threading.Lock()
    gate.acquire()  # hold it while the workers queue up in a known order

    def worker(index: int, queued: threading.Event) -> None:
        nonlocal inside, overlap
        queued.set()
        with gate.hold():
            with lock:
                inside += 1
                overlap = overlap or inside > 1
                order.append(index)
            threading.Event().wait(0.005)
            with lock:
                inside -= 1

    threads = []
    for index in range(5):
        queued = threading.Event()
        thread = threading.Thread(target=worker, args=(index, queued))
        thread.start()
        queued.wait()
        while len(gate._waiters) < index + 1:  # wait until it is really queued
            threading.Event().wait(0.001)
        threads.append(thread)
    gate.release()
    for thread in threads:
        thread.join()
    assert not overlap
    assert order == [0, 1, 2, 3, 4]
    assert not gate.locked


async def test_tasks_on_one_loop_are_serialized() -> None:
    gate = PathGate()
    active = 0
    peak = 0

    async def worker() -> None:
        nonlocal active, peak
        async with gate.ahold():
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            active -= 1

    await asyncio.gather(*(worker() for _ in range(10)))
    assert peak == 1
    assert not gate.locked


async def test_a_waiter_on_another_loop_is_woken_across_loops() -> None:
    gate = PathGate()
    await gate.aacquire()
    acquired = threading.Event()

    def other_loop() -> None:
        async def take() -> None:
            async with gate.ahold():
                acquired.set()

        asyncio.run(take())

    thread = threading.Thread(target=other_loop)
    thread.start()
    await _queued(gate)
    assert not acquired.is_set()
    gate.release()
    await asyncio.to_thread(thread.join)
    assert acquired.is_set()
    assert not gate.locked


async def test_sync_and_async_holders_exclude_each_other() -> None:
    gate = PathGate()
    await gate.aacquire()
    entered = threading.Event()

    def sync_holder() -> None:
        with gate.hold():
            entered.set()

    thread = threading.Thread(target=sync_holder)
    thread.start()
    await _queued(gate)
    assert not entered.is_set()
    gate.release()
    await asyncio.to_thread(thread.join)
    assert entered.is_set()


async def test_cancelling_a_queued_waiter_cancels_only_its_own_signal() -> None:
    gate = PathGate()
    await gate.aacquire()
    cancelled = asyncio.ensure_future(gate.aacquire())
    survivor = asyncio.ensure_future(gate.aacquire())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert len(gate._waiters) == 1
    gate.release()
    await survivor  # ownership went to the survivor, not the cancelled waiter
    assert gate.locked
    gate.release()
    assert not gate.locked


async def test_a_waiter_cancelled_after_being_granted_passes_ownership_on() -> None:
    gate = PathGate()
    await gate.aacquire()
    first = asyncio.ensure_future(gate.aacquire())
    second = asyncio.ensure_future(gate.aacquire())
    await asyncio.sleep(0)
    gate.release()  # grants `first` (its wake-up is scheduled, not yet run)
    first.cancel()  # ... and it is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, timeout=5)
    assert gate.locked
    gate.release()
    assert not gate.locked


async def test_await_off_thread_drains_started_io_across_repeated_cancellation() -> None:
    started = threading.Event()
    finish = threading.Event()
    finished: list[bool] = []

    def io() -> str:
        started.set()
        finish.wait(5)
        finished.append(True)
        return "done"

    async def caller() -> str:
        return await _await_off_thread(asyncio.ensure_future(asyncio.to_thread(io)))

    task = asyncio.ensure_future(caller())
    assert await asyncio.to_thread(started.wait, 60)
    task.cancel()
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done()  # still draining the started I/O
    finish.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == [True]


async def test_await_off_thread_returns_results_and_raises_errors() -> None:
    async def value() -> int:
        return 7

    async def failure() -> int:
        raise FileNotFoundError("gone")

    assert await _await_off_thread(asyncio.ensure_future(value())) == 7
    with pytest.raises(FileNotFoundError):
        await _await_off_thread(asyncio.ensure_future(failure()))
