"""apply_sized: small tool results are rewritten on the loop, big ones in a worker."""

from __future__ import annotations

import threading

from langchain_core.messages import ToolMessage

from middlewares._tool_results import OFF_LOOP_CHARS, apply_sized


async def test_small_on_the_loop_big_in_a_worker() -> None:
    loop_thread = threading.get_ident()
    seen: list[bool] = []

    def rewrite(message: ToolMessage) -> ToolMessage:
        seen.append(threading.get_ident() == loop_thread)
        return message

    small = ToolMessage("x" * 10, tool_call_id="a")
    big = ToolMessage("x" * (OFF_LOOP_CHARS + 1), tool_call_id="b")
    assert await apply_sized(small, rewrite, small) is small
    assert await apply_sized(big, rewrite, big) is big
    assert seen == [True, False]
