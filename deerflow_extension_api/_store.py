"""``ExtensionData``, the type-keyed store, and the task store's lifetime.

Why type keys: two extensions cannot collide on a key they did not define, and
nobody writes into the runtime context directly. The *app store* lives for the
process (one per loaded plugin set); a *task store* is created for each lead run
and each subagent execution and dropped when it ends. The host makes the live
task store visible to contributed hooks while they run (``task_store_from_runtime``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

__all__ = ["ExtensionData", "TaskStoreScope", "active_task_store", "task_store_from_runtime"]

T = TypeVar("T")

_LIVE_TASK_STORE: ContextVar[ExtensionData | None] = ContextVar(
    "deerflow_live_task_store", default=None
)


class ExtensionData:
    """A thread-safe mapping from a type to one value of that type."""

    __slots__ = ("_lock", "_values")

    def __init__(self) -> None:
        self._values: dict[type[Any], Any] = {}
        self._lock = threading.Lock()

    def get(self, key: type[T]) -> T | None:
        """The value stored under ``key``, or None."""
        return cast("T | None", self._values.get(key))

    def get_or_init(self, key: type[T], factory: Callable[[], T]) -> T:
        """The value under ``key``, created by ``factory()`` the first time (atomically)."""
        with self._lock:
            if key not in self._values:
                value = factory()
                if not isinstance(value, key):
                    raise TypeError(
                        f"ExtensionData: factory for {key.__name__} returned {type(value).__name__}"
                    )
                self._values[key] = value
            return cast("T", self._values[key])

    def set(self, value: Any) -> None:
        """Store ``value`` under its own type."""
        with self._lock:
            self._values[type(value)] = value

    def pop(self, key: type[T]) -> T | None:
        with self._lock:
            return cast("T | None", self._values.pop(key, None))

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        names = ", ".join(sorted(k.__name__ for k in self._values))
        return f"ExtensionData({names})"


def _run_key(runtime: Any) -> str | None:
    """The run a runtime belongs to, when the runtime says (LangGraph Server always does)."""
    info = getattr(runtime, "execution_info", None)
    run_id = getattr(info, "run_id", None)
    if run_id:
        return str(run_id)
    config = getattr(runtime, "config", None)
    if isinstance(config, dict):
        configurable = config.get("configurable") or {}
        candidate = config.get("run_id") or configurable.get("run_id")
        if candidate:
            return str(candidate)
    return None


class TaskStoreScope:
    """Task stores of one agent assembly: one ``ExtensionData`` per run it serves.

    Graph factories assemble an agent per run (and per subagent execution), so a
    scope normally serves one run and is discarded with the agent. If the same
    agent object serves several runs, each run id gets its own store; only the
    most recent few are kept.
    """

    __slots__ = ("_lock", "_max_runs", "_stores")

    def __init__(self, max_runs: int = 8) -> None:
        self._stores: OrderedDict[str | None, ExtensionData] = OrderedDict()
        self._lock = threading.Lock()
        self._max_runs = max_runs

    def store_for(self, runtime: Any) -> ExtensionData:
        key = _run_key(runtime)
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                store = ExtensionData()
                self._stores[key] = store
                while len(self._stores) > self._max_runs:
                    self._stores.popitem(last=False)
            else:
                self._stores.move_to_end(key)
            return store

    def discard(self, runtime: Any) -> None:
        """Drop the store of ``runtime``'s run (its end)."""
        with self._lock:
            self._stores.pop(_run_key(runtime), None)


@contextmanager
def active_task_store(store: ExtensionData | None) -> Iterator[None]:
    """Make ``store`` the live task store while a contributed hook runs."""
    token = _LIVE_TASK_STORE.set(store)
    try:
        yield
    finally:
        _LIVE_TASK_STORE.reset(token)


def task_store_from_runtime(runtime: Any) -> ExtensionData | None:
    """The live task's store, or None when there is no live task: pass through then."""
    if runtime is None:
        return None
    return _LIVE_TASK_STORE.get()
