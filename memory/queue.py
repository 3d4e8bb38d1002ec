"""The extraction queue: conversations wait here, off the request path, for extraction.

Why a queue: extraction is a model call; doing it inside the run would slow
every run and could fail it. ``MemoryMiddleware`` only *submits* a job (O(1),
never raises) and returns. A worker task on the server's event loop runs jobs:

- **debounced per thread**: a newer job for the same thread replaces the pending
  one and restarts its ``debounce_seconds`` wait, so a burst of runs on one
  thread costs one extraction of its latest state;
- **bounded**: at most ``max_queue`` pending threads; beyond that the oldest
  pending job is dropped with a warning;
- **flushable and drained**: ``flush()`` runs every pending job now and waits
  (tests use it instead of sleeping), ``drain()`` does the same at shutdown
  with a deadline.

Failures are logged with their reason and change nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MemoryJob", "MemoryQueue", "get_memory_queue"]

logger = logging.getLogger("deerflow.memory")


@dataclass
class MemoryJob:
    """One conversation to extract from, with everything the worker needs."""

    user_id: str
    thread_id: str
    run: Callable[[], Awaitable[Any]]
    """Does the extraction (captures the model, store and turns)."""
    due: float = field(default=0.0)


class MemoryQueue:
    """Per-thread debounced, bounded queue of extraction jobs, worked on one event loop."""

    def __init__(
        self,
        *,
        debounce_seconds: float = 2.0,
        max_pending: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.debounce_seconds = debounce_seconds
        self.max_pending = max_pending
        self._clock = clock
        self._pending: OrderedDict[str, MemoryJob] = OrderedDict()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active = 0
        self._idle: asyncio.Event | None = None
        self.completed = 0
        self.failed = 0
        self.dropped = 0

    def configure(self, *, debounce_seconds: float, max_pending: int) -> None:
        self.debounce_seconds = debounce_seconds
        self.max_pending = max_pending

    # --- submission ----------------------------------------------------------

    def submit(self, job: MemoryJob) -> None:
        """Queue ``job`` (replacing the thread's pending one). Never raises."""
        try:
            self._ensure_worker()
            key = f"{job.user_id}\0{job.thread_id}"
            job.due = self._clock() + self.debounce_seconds
            self._pending.pop(key, None)
            self._pending[key] = job
            while len(self._pending) > self.max_pending:
                self._pending.popitem(last=False)
                self.dropped += 1
                logger.warning("memory queue full; dropped the oldest pending conversation")
            assert self._wake is not None
            self._wake.set()
        except Exception:
            logger.exception("memory job not queued")

    @property
    def pending(self) -> int:
        return len(self._pending)

    # --- worker ----------------------------------------------------------------

    def _ensure_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._worker is not None and not self._worker.done() and self._loop is loop:
            return
        self._loop = loop
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._worker = loop.create_task(self._work(), name="deerflow-memory-queue")

    async def _run(self, job: MemoryJob) -> None:
        self._active += 1
        assert self._idle is not None
        self._idle.clear()
        try:
            await job.run()
            self.completed += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed += 1
            logger.warning(
                "memory extraction for thread %s failed (%s: %s); memory unchanged",
                job.thread_id,
                type(exc).__name__,
                exc,
            )
        finally:
            self._active -= 1
            if self._active == 0 and not self._pending:
                self._idle.set()

    def _due_jobs(self, *, everything: bool) -> list[MemoryJob]:
        now = self._clock()
        keys = [k for k, j in self._pending.items() if everything or j.due <= now]
        return [self._pending.pop(k) for k in keys]

    async def _work(self) -> None:
        assert self._wake is not None
        while True:
            jobs = self._due_jobs(everything=False)
            for job in jobs:
                await self._run(job)
            if not self._pending:
                assert self._idle is not None
                if self._active == 0:
                    self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            wait = max(0.0, min(j.due for j in self._pending.values()) - self._clock())
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait or 0.001)

    async def flush(self) -> None:
        """Run every pending job now and wait until the queue is idle."""
        for job in self._due_jobs(everything=True):
            await self._run(job)
        if self._idle is not None:
            await self._idle.wait()

    async def drain(self, timeout: float = 30.0) -> None:
        """At shutdown: flush within ``timeout``, then stop the worker."""
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            logger.warning("memory queue: %d conversations not extracted at shutdown", self.pending)
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
            self._worker = None


_QUEUE = MemoryQueue()


def get_memory_queue() -> MemoryQueue:
    """The process's queue (the server runs one event loop per process)."""
    return _QUEUE
