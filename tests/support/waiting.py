"""Waiting for a condition, never for a time.

A loop of ``range(200)`` with ``sleep(0.02)`` is a 4-second timer in disguise:
on a loaded machine the condition comes later and the test fails for nothing.
``eventually`` polls until the condition holds; its deadline only bounds a
broken system and is generous on purpose.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["DEADLINE_SECONDS", "eventually"]

DEADLINE_SECONDS = 60.0


async def eventually(
    condition: Callable[[], Any | Awaitable[Any]],
    *,
    message: str = "the condition never held",
    timeout: float = DEADLINE_SECONDS,
    interval: float = 0.02,
) -> Any:
    """Return the first truthy value of ``condition()`` (sync or async); fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"{message} (waited {timeout:g} s)")
        await asyncio.sleep(interval)
