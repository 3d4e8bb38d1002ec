"""PrefixFold: a fold over a history resumed after the longest prefix shared with the last one."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from middlewares._prefix_fold import PrefixFold
from middlewares.dangling_tool_call import _repair, repair_tool_call_protocol


def _counting() -> tuple[PrefixFold[tuple[str, ...]], list[Any]]:
    stepped: list[Any] = []

    def step(state: tuple[str, ...], message: Any) -> tuple[str, ...]:
        stepped.append(message)
        return (*state, message.text)

    return PrefixFold((), step), stepped


def test_a_grown_history_only_folds_its_new_messages() -> None:
    fold, stepped = _counting()
    history: list[Any] = [HumanMessage("a"), AIMessage("b")]
    assert fold(history) == ("a", "b")
    grown = [*history, HumanMessage("c")]
    stepped.clear()
    assert fold(grown) == ("a", "b", "c")
    assert [m.text for m in stepped] == ["c"]


def test_an_edit_in_the_middle_resumes_before_it_and_equal_objects_are_not_enough() -> None:
    fold, stepped = _counting()
    history: list[Any] = [HumanMessage("a"), AIMessage("b"), HumanMessage("c")]
    fold(history)
    edited = [history[0], AIMessage("B"), history[2]]
    stepped.clear()
    assert fold(edited) == ("a", "B", "c")
    assert len(stepped) == 2
    copy = [history[0], *(m.model_copy() for m in edited[1:])]  # equal, not identical
    stepped.clear()
    assert fold(copy) == ("a", "B", "c") and len(stepped) == 2


def test_histories_of_other_threads_and_empty_ones_do_not_mix() -> None:
    fold, _ = _counting()
    assert fold([]) == ()
    alice = [HumanMessage("alice")]
    bob = [HumanMessage("bob")]
    assert fold(alice) == ("alice",)
    assert fold(bob) == ("bob",)
    assert fold([*alice, AIMessage("hi")]) == ("alice", "hi")
    assert fold([AIMessage("x")]) == ("x",)  # a shorter, different history
    assert fold(alice) == ("alice",)  # a prefix of what was seen


def test_the_dangling_check_stays_exact_as_a_history_grows_and_is_edited() -> None:
    """Each step of one history compared with the full repair (the memo resumes each time)."""
    history: list[Any] = [HumanMessage("go")]
    snapshots: list[list[Any]] = []
    for turn in range(6):
        call = {"name": "ls", "args": {}, "id": f"c{turn}"}
        history.append(AIMessage("", tool_calls=[call]))
        snapshots.append(list(history))  # unanswered call: needs a repair
        history.append(ToolMessage("ok", tool_call_id=f"c{turn}", name="ls"))
        snapshots.append(list(history))  # sound
    snapshots.append([*history[:3], ToolMessage("late", tool_call_id="c0"), *history[3:]])
    snapshots.append([*history[:4], *history[5:]])  # a result removed in the middle
    snapshots.append(list(history))
    verdicts = []
    for snapshot in snapshots:
        fast, changed = repair_tool_call_protocol(snapshot)
        full, full_changed = _repair(snapshot)
        assert changed == full_changed
        assert [m.content for m in fast] == [m.content for m in full]
        verdicts.append(changed)
    assert verdicts[:4] == [True, False, True, False] and verdicts[-3:] == [True, True, False]


def test_the_cache_is_bounded_in_histories_and_messages_and_stays_correct() -> None:
    stepped: list[Any] = []

    def step(count: int, message: Any) -> int:
        stepped.append(message)
        return count + 1

    fold = PrefixFold(0, step, slots=2, max_messages=5)
    histories = [[HumanMessage(f"{n}-{i}") for i in range(2)] for n in range(3)]
    for history in histories:
        assert fold(history) == 2
    assert len(fold._entries) == 2 and fold._held == 4  # the oldest history was dropped
    stepped.clear()
    assert fold(histories[0]) == 2 and len(stepped) == 2  # recomputed, still right
    long = [HumanMessage(str(i)) for i in range(6)]
    assert fold(long) == 6 and fold(long) == 6  # longer than the bound: never kept
    assert all(len(seen) <= 5 for seen, _ in fold._entries.values())
    assert fold._held == sum(len(seen) for seen, _ in fold._entries.values()) <= 5
