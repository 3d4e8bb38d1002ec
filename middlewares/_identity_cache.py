"""A small cache keyed by object identity, for per-message work repeated every model call.

Each model call of a run re-reads the whole history, and most messages are the
same objects as on the previous call. Verdicts that depend only on a message
(is its tool-call protocol clean, what receipt does it carry) are kept here,
keyed by ``id()``; the object itself is stored and compared with ``is``, so a
reused id can never return another message's verdict. Bounded: cleared when
full (a cache, never a source of truth).
"""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar

__all__ = ["IdentityCache"]

V = TypeVar("V")
_MISSING = object()


class IdentityCache(Generic[V]):
    def __init__(self, maxsize: int = 8192) -> None:
        self._maxsize = maxsize
        self._items: dict[int, tuple[Any, V]] = {}
        self._lock = threading.Lock()

    def get(self, obj: Any, default: Any = _MISSING) -> Any:
        hit = self._items.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        return default

    def put(self, obj: Any, value: V) -> V:
        with self._lock:
            if len(self._items) >= self._maxsize:
                self._items.clear()
            self._items[id(obj)] = (obj, value)
        return value

    @staticmethod
    def missing(value: Any) -> bool:
        return value is _MISSING
