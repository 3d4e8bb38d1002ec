"""Helpers for the persistence tests and the checkpointer benchmark."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph.state import CompiledStateGraph

from runtime.scripted_model import ScriptedChatModel, ScriptTurn
from runtime.state import ThreadState
from tests.support.tools import echo

__all__ = [
    "STORAGE_SQL_INTERNED",
    "STORAGE_SQL_STOCK",
    "agent",
    "message_shape",
    "nap",
    "raw_message_bytes",
    "thread_turns",
]

# Bytes a thread holds in every persistence table: payloads plus the
# checkpoint rows' own JSON (as Postgres stores it, pg_column_size).
STORAGE_SQL = """
SELECT 'checkpoints' AS t, count(*) AS n,
       coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0) AS b
FROM checkpoints WHERE thread_id = %(t)s
UNION ALL
SELECT 'checkpoint_blobs', count(*), coalesce(sum(coalesce(octet_length(blob), 0)), 0)
FROM checkpoint_blobs WHERE thread_id = %(t)s
UNION ALL
SELECT 'checkpoint_writes', count(*), coalesce(sum(octet_length(blob)), 0)
FROM checkpoint_writes WHERE thread_id = %(t)s
{extra}
"""

STORAGE_SQL_INTERNED = STORAGE_SQL.format(
    extra="""
UNION ALL
SELECT 'checkpoint_messages', count(*),
       coalesce(sum(8 + octet_length(key) + octet_length(content)
                    + coalesce(octet_length(message_id), 0)), 0)
FROM checkpoint_messages WHERE thread_id = %(t)s
UNION ALL
SELECT 'checkpoint_message_contents', count(*),
       coalesce(sum(octet_length(digest) + octet_length(blob)), 0)
FROM checkpoint_message_contents WHERE thread_id = %(t)s
"""
)
STORAGE_SQL_STOCK = STORAGE_SQL.format(extra="")


@tool
async def nap(seconds: float) -> str:
    """Sleep for a while (a slow tool, so a second run can interrupt the first)."""
    await asyncio.sleep(min(float(seconds), 30.0))
    return f"slept {seconds}s"


def _words(rng: random.Random, vocabulary: Sequence[str], count: int) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def thread_turns(
    turns: int,
    *,
    seed: int = 7,
    question_words: int = 40,
    tool_words: int = 250,
    answer_words: int = 170,
) -> tuple[list[str], list[dict[str, Any]]]:
    """User questions and a scripted model for ``turns`` tool-using turns.

    Each turn: the user asks, the model calls ``echo`` (whose result repeats a
    long argument, like a file read or a search result), then answers in text.
    Random words keep Postgres from compressing the payloads away.
    """
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(4000)
    ]
    questions = [f"Question {i}: {_words(rng, vocabulary, question_words)}" for i in range(turns)]
    script: list[dict[str, Any]] = []
    for i in range(turns):
        script.append(
            {
                "content": "",
                "tool_calls": [
                    {
                        "name": "echo",
                        "args": {"text": f"{i}: {_words(rng, vocabulary, tool_words)}"},
                    }
                ],
            }
        )
        script.append({"content": f"Answer {i}: {_words(rng, vocabulary, answer_words)}"})
    return questions, script


def agent(
    checkpointer: BaseCheckpointSaver[Any] | None, script: list[dict[str, Any]]
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A real ``create_agent`` graph with the scripted model and the echo tool."""
    return create_agent(
        ScriptedChatModel(script=[ScriptTurn.model_validate(turn) for turn in script]),
        [echo],
        state_schema=ThreadState,
        checkpointer=checkpointer,
    )


def raw_message_bytes(messages: Sequence[BaseMessage]) -> int:
    """The raw size of a conversation: each message serialised once."""
    serde = JsonPlusSerializer()
    return sum(len(serde.dumps_typed(m)[1]) for m in messages)


def message_shape(messages: Sequence[BaseMessage]) -> list[tuple[str, Any, Any]]:
    """What a message list says, without ids (which differ between runs)."""
    return [
        (type(m).__name__, m.content, [c.get("args") for c in getattr(m, "tool_calls", [])])
        for m in messages
    ]
