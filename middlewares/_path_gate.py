"""A per-(scope, path) gate usable from threads and from any event loop.

Why not ``threading.Lock`` or ``asyncio.Lock``: ReadBeforeWriteMiddleware runs
its sync hooks in worker threads and its async hooks on (possibly several)
event loops, and all of them must serialize on the same path. Async waiters
never block a loop: each owns its own future on its own loop, released
ownership is handed over directly to the next waiter, and notification happens
outside the state lock (``loop.call_soon_threadsafe``). Cancelling a waiter
cancels only its own signal; if ownership had already been handed to it, it
passes ownership on before the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["PathGate", "_await_off_thread", "gate_for"]

T = TypeVar("T")


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future[None] | None = None
    event: threading.Event | None = None
    granted: bool = False


@dataclass(eq=False)
class PathGate:
    """A FIFO mutex with sync (``hold``) and async (``ahold``) acquisition."""

    _state: threading.Lock = field(default_factory=threading.Lock)
    _held: bool = False
    _waiters: deque[_Waiter] = field(default_factory=deque)

    # -- sync ----------------------------------------------------------------

    def acquire(self) -> None:
        with self._state:
            if not self._held:
                self._held = True
                return
            waiter = _Waiter(event=threading.Event())
            self._waiters.append(waiter)
        assert waiter.event is not None
        waiter.event.wait()

    @contextmanager
    def hold(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()

    # -- async ---------------------------------------------------------------

    async def aacquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._state:
            if not self._held:
                self._held = True
                return
            waiter = _Waiter(loop=loop, future=loop.create_future())
            self._waiters.append(waiter)
        assert waiter.future is not None
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._state:
                owns = waiter.granted
                if not owns:
                    self._waiters.remove(waiter)
            if owns:
                self.release()
            raise

    @asynccontextmanager
    async def ahold(self) -> AsyncIterator[None]:
        await self.aacquire()
        try:
            yield
        finally:
            self.release()

    # -- release ---------------------------------------------------------------

    def release(self) -> None:
        """Hand ownership to the next waiter (FIFO), or free the gate."""
        while True:
            with self._state:
                if not self._waiters:
                    self._held = False
                    return
                waiter = self._waiters.popleft()
                waiter.granted = True
            if self._notify(waiter):
                return
            # The waiter's loop is gone: nobody will ever take it; pass it on.

    def _notify(self, waiter: _Waiter) -> bool:
        if waiter.event is not None:
            waiter.event.set()
            return True
        assert waiter.loop is not None and waiter.future is not None
        future = waiter.future

        def settle() -> None:
            if future.cancelled():
                return  # its aacquire sees granted=True and releases
            if not future.done():
                future.set_result(None)

        try:
            waiter.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # loop closed
            return False
        return True

    @property
    def locked(self) -> bool:
        with self._state:
            return self._held


_GATES: weakref.WeakValueDictionary[tuple[str, str], PathGate] = weakref.WeakValueDictionary()
_GATES_GUARD = threading.Lock()


def gate_for(scope: str, path: str) -> PathGate:
    """The process-wide gate of ``(scope, path)`` (kept while anyone holds a reference)."""
    key = (scope, path)
    with _GATES_GUARD:
        gate = _GATES.get(key)
        if gate is None:
            gate = PathGate()
            _GATES[key] = gate
        return gate


async def _await_off_thread(task: asyncio.Future[T]) -> T:
    """Await ``task`` (already started I/O), draining it across repeated cancellation.

    Cancelling the caller does not abandon I/O that is already running under a
    gate: the task is awaited to completion (however many times the caller is
    cancelled meanwhile), then the first cancellation is re-raised.
    """
    first_cancel: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.cancelled():
                raise first_cancel or exc from None
            if first_cancel is None:
                first_cancel = exc
            if not task.done():
                continue
            _consume(task)
            raise first_cancel from None
        except BaseException:
            if first_cancel is not None:
                raise first_cancel from None
            raise
        if first_cancel is not None:
            raise first_cancel
        return result


def _consume(task: asyncio.Future[Any]) -> None:
    """Mark a finished task's exception as retrieved (no "never retrieved" warning)."""
    if not task.cancelled():
        task.exception()
