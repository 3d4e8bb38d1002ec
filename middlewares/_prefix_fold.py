"""A left fold over a message history, resumed where the last history it saw diverges.

Why: several middlewares derive a fact from the whole history before every
model call (is the tool-call protocol sound, which receipts exist, how many
tokens). Between two calls of a run the history is the previous one plus a few
messages, as the same objects, so recomputing from the first message makes a
run quadratic in its length. ``PrefixFold`` keeps, per history, the fold's
state after every message; the next history is compared with it by identity
(``is``, a few nanoseconds a message) and the fold resumes after the longest
shared prefix. A history edited in the middle (summarization, a repaired
message) simply resumes earlier; correctness never depends on a hit.

States must be immutable: a state is shared by every history that has the
same prefix. Messages are treated as immutable everywhere in the chain (the
identity caches rely on it too).

Memory: a remembered history holds its messages (identity needs the objects
alive: a freed message's id could be reused). The cache is an LRU bounded both
in histories (``slots``) and in messages held (``max_messages``), so a finished
run's history is dropped as soon as newer runs need the room; a run evicted
mid-way only recomputes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from operator import is_
from typing import Any, Generic, TypeVar

__all__ = ["PrefixFold", "prefix_count", "prefix_latest"]

S = TypeVar("S")


class PrefixFold(Generic[S]):
    def __init__(
        self,
        initial: S,
        step: Callable[[S, Any], S],
        *,
        slots: int = 16,
        max_messages: int = 4096,
    ) -> None:
        self._initial = initial
        self._step = step
        self._slots = slots
        self._max_messages = max_messages
        self._held = 0
        # id(first message) -> (the history as a tuple, states[i] = state after i messages)
        self._entries: OrderedDict[int, tuple[tuple[Any, ...], list[S]]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, messages: Sequence[Any]) -> S:
        if not messages:
            return self._initial
        key = id(messages[0])
        entry = self._entries.get(key)
        shared = 0
        states: list[S]
        if entry is not None and entry[0][0] is messages[0]:
            seen, known = entry
            same = list(map(is_, seen, messages))  # compared at C speed
            try:
                shared = same.index(False)
            except ValueError:
                shared = len(same)
            states = known[: shared + 1]  # a copy: another thread may use the same entry
        else:
            states = [self._initial]
        state = states[-1]
        step = self._step
        for index in range(shared, len(messages)):
            state = step(state, messages[index])
            states.append(state)
        if len(messages) > self._max_messages:
            return state  # too long to remember: computed, not kept
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._held -= len(previous[0])
            self._entries[key] = (tuple(messages), states)
            self._held += len(messages)
            while len(self._entries) > self._slots or self._held > self._max_messages:
                _, (dropped, _) = self._entries.popitem(last=False)
                self._held -= len(dropped)
        return state


def prefix_count(predicate: Callable[[Any], bool]) -> PrefixFold[int]:
    """How many messages of a history satisfy ``predicate`` (for "is there any ..." checks)."""

    def step(count: int, message: Any) -> int:
        return count + 1 if predicate(message) else count

    return PrefixFold(0, step)


def prefix_latest(predicate: Callable[[Any], bool]) -> PrefixFold[tuple[int, int]]:
    """``(messages folded, index of the newest one satisfying predicate or -1)``."""

    def step(state: tuple[int, int], message: Any) -> tuple[int, int]:
        position, latest = state
        return position + 1, position if predicate(message) else latest

    return PrefixFold((0, -1), step)
