"""A long scripted conversation for summarization tests and the compaction benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from middlewares.summarization import count_request_tokens
from runtime.scripted_model import ScriptedError, make_provider_error
from tests.support.scripted import (
    ai_text,
    ai_tools,
    recording_model_entry,
    scripted_model_entry,
    tool_call,
    write_config,
)
from tests.support.strict_provider import StrictRecordingModel

__all__ = [
    "CONTEXT_WINDOW",
    "STEPS_PER_RUN",
    "WindowedStrictModel",
    "long_config",
    "run_script",
    "thread_storage_bytes",
]

CONTEXT_WINDOW = 2500
STEPS_PER_RUN = 60
_FILLER = "a line of tool output that fills the context " * 6


def run_script(steps: int = STEPS_PER_RUN) -> list[dict[str, Any]]:
    """``steps - 1`` echo calls with bulky arguments, then a text answer."""
    turns: list[dict[str, Any]] = [
        ai_tools(tool_call("echo", text=f"step {n}: {_FILLER}")) for n in range(steps - 1)
    ]
    return [*turns, ai_text("All steps done.")]


class WindowedStrictModel(StrictRecordingModel):
    """A strict provider with a context window: a request at or over ``window``
    tokens (as this project counts them) is refused like a provider's HTTP 400.

    For black-box runs, where a test cannot read the requests back: a run that
    reaches its scripted end proves every request was strict and fit the window.
    """

    window: int = Field(default=CONTEXT_WINDOW, ge=1)

    def _check(self, messages: Any) -> None:
        super()._check(messages)
        size = count_request_tokens(messages)
        if size >= self.window:
            raise make_provider_error(
                ScriptedError(status=400, message=f"context length exceeded: {size} tokens")
            )


def long_config(
    directory: Path,
    *,
    key: str,
    steps: int = STEPS_PER_RUN,
    windowed: bool = False,
    **sections: Any,
) -> Path:
    """A config whose run model plays ``run_script`` per run on a small context window.

    ``windowed`` uses :class:`WindowedStrictModel` (black-box runs) instead of
    the recording model (``key`` names its recordings).
    """
    sections.setdefault("tools", [{"name": "echo", "use": "tests.support.tools:echo"}])
    sections.setdefault("subagents", {"enabled": False})
    sections.setdefault("loop_detection", {"enabled": False})
    sections.setdefault(
        "summarization",
        {
            "enabled": True,
            "model": "summarizer",
            "trigger_fraction": 0.6,
            "keep_fraction": 0.25,
        },
    )
    run_model = recording_model_entry(
        run_script(steps), key=key, turn_by="calls", context_window=CONTEXT_WINDOW
    )
    if windowed:
        run_model = {
            "name": "windowed",
            "use": "tests.support.long_conversation:WindowedStrictModel",
            "script": run_script(steps),
            "turn_by": "calls",
            "context_window": CONTEXT_WINDOW,
            "window": CONTEXT_WINDOW,
        }
    models = [
        run_model,
        scripted_model_entry(
            [ai_text("Summary: the agent echoed many steps of tool output.")],
            name="summarizer",
            turn_by="calls",
            cycle_from=0,
        ),
    ]
    return write_config(directory, models=models, **sections)


async def thread_storage_bytes(pool: Any, thread_id: str) -> int:
    """Bytes the checkpoint tables hold for ``thread_id`` (every table with a thread_id)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT table_name FROM information_schema.columns "
            "WHERE column_name = 'thread_id' AND table_schema = current_schema()"
        )
        tables = [row["table_name"] for row in await cursor.fetchall()]
        total = 0
        for table in tables:
            cursor = await conn.execute(
                f'SELECT coalesce(sum(pg_column_size(t.*)), 0) AS n FROM "{table}" t '
                "WHERE thread_id = %s",
                (thread_id,),
            )
            row = await cursor.fetchone()
            total += int(row["n"])
        return total
