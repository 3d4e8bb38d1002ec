"""``ExtensionData`` and the task store's scoping."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from deerflow_extension_api import ExtensionData, task_store_from_runtime
from deerflow_extension_api._store import TaskStoreScope, active_task_store


@dataclass
class Counter:
    value: int = 0


def test_type_keyed_values() -> None:
    store = ExtensionData()
    assert store.get(Counter) is None
    counter = store.get_or_init(Counter, Counter)
    counter.value += 1
    assert store.get_or_init(Counter, Counter).value == 1
    assert Counter in store and len(store) == 1
    store.set(Counter(5))
    assert store.get(Counter) == Counter(5)
    assert store.pop(Counter) == Counter(5) and store.get(Counter) is None
    with pytest.raises(TypeError, match="returned int"):
        store.get_or_init(Counter, lambda: 3)  # type: ignore[arg-type, return-value]


def test_get_or_init_is_atomic_across_threads() -> None:
    store = ExtensionData()
    made: list[int] = []

    def factory() -> Counter:
        made.append(1)
        return Counter()

    threads = [
        threading.Thread(target=store.get_or_init, args=(Counter, factory)) for _ in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == [1]


def test_one_store_per_run_and_none_without_a_live_task() -> None:
    scope = TaskStoreScope(max_runs=2)
    run = lambda run_id: SimpleNamespace(execution_info=SimpleNamespace(run_id=run_id))  # noqa: E731
    first, second = scope.store_for(run("a")), scope.store_for(run("b"))
    assert first is scope.store_for(run("a")) and first is not second
    scope.store_for(run("c"))  # evicts the least recently used run ("b")
    assert scope.store_for(run("b")) is not second
    scope.discard(run("a"))
    assert scope.store_for(run("a")) is not first
    config_run = SimpleNamespace(config={"configurable": {"run_id": "z"}})
    assert scope.store_for(config_run) is scope.store_for(config_run)

    runtime = object()
    assert task_store_from_runtime(runtime) is None
    with active_task_store(first):
        assert task_store_from_runtime(runtime) is first
        assert task_store_from_runtime(None) is None
    assert task_store_from_runtime(runtime) is None
