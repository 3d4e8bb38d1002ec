"""Test tools and a test model for subagent tests, sharing state with the test.

The in-process LangGraph Server runs graphs on the test's event loop and in the
test's process, so these module-level boards are the same objects the tests
read: a test can see how many subagents are inside ``gate`` at once and release
them, and see that ``hang`` was cancelled. No timers decide anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.tools import tool

from runtime.scripted_model import ScriptedChatModel

__all__ = [
    "GATES",
    "HANGS",
    "SEEN",
    "ExplodingChatModel",
    "GateBoard",
    "HangBoard",
    "gate",
    "hang",
    "reset_boards",
    "wait_until",
    "whoami",
]


@dataclass
class GateBoard:
    """Who is inside ``gate`` now, the most at once, and permits to leave."""

    active: int = 0
    max_active: int = 0
    entered: int = 0
    left: int = 0
    cancelled: int = 0
    order: list[str] = field(default_factory=list)
    permits: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(0))

    def release(self, count: int = 1) -> None:
        for _ in range(count):
            self.permits.release()


@dataclass
class HangBoard:
    """``hang`` waits on ``never`` (nothing sets it) until it is cancelled."""

    entered: int = 0
    cancelled: int = 0
    never: asyncio.Event = field(default_factory=asyncio.Event)


GATES: dict[str, GateBoard] = {}
HANGS: dict[str, HangBoard] = {}
SEEN: list[dict[str, Any]] = []


def reset_boards() -> None:
    GATES.clear()
    HANGS.clear()
    SEEN.clear()


async def wait_until(condition: Callable[[], bool], *, timeout: float = 30.0) -> None:
    """Yield to the loop until ``condition`` holds; ``timeout`` only bounds a failing test."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - plain attributes, no event to await
            await asyncio.sleep(0.01)


@tool
async def gate(key: str) -> str:
    """Wait at the gate named ``key`` until the test lets one caller through."""
    board = GATES.setdefault(key, GateBoard())
    board.active += 1
    board.entered += 1
    board.max_active = max(board.max_active, board.active)
    try:
        await board.permits.acquire()
    except asyncio.CancelledError:
        board.cancelled += 1
        raise
    finally:
        board.active -= 1
    board.left += 1
    return f"passed gate {key}"


@tool
async def hang(key: str) -> str:
    """Wait forever (until cancelled)."""
    board = HANGS.setdefault(key, HangBoard())
    board.entered += 1
    try:
        await board.never.wait()
    except asyncio.CancelledError:
        board.cancelled += 1
        raise
    return "unreachable"


@tool
async def whoami(runtime: ToolRuntime[Any, Any]) -> str:
    """Record what the running agent sees of its identity, thread and state."""
    configurable = (runtime.config or {}).get("configurable") or {}
    user = configurable.get("langgraph_auth_user")
    SEEN.append(
        {
            "identity": getattr(user, "identity", None),
            "auth_user_id": configurable.get("langgraph_auth_user_id"),
            "thread_id": configurable.get("thread_id"),
            "checkpoint_ns": configurable.get("checkpoint_ns"),
            "sandbox": runtime.state.get("sandbox"),
            "thread_data": runtime.state.get("thread_data"),
        }
    )
    return "recorded"


class ExplodingChatModel(ScriptedChatModel):
    """A model whose every call fails, as a broken provider integration would."""

    def _message_for(self, messages: Any) -> Any:
        raise RuntimeError("model exploded")
