"""A ``DeerflowPostgresSaver`` replica in its own OS process, driven over stdin/stdout.

``python -m tests.support.saver_replica <postgres uri>`` keeps one saver (one
cache) for its lifetime and answers one JSON line per command:

- ``{"op": "put", "thread": t, "parent": id|null, "messages": [[type, id, text]], "run": r}``
  -> ``{"id": checkpoint_id}``
- ``{"op": "read", "thread": t, "checkpoint": id|null}`` -> ``{"messages": [[type, id, text]]}``
- ``{"op": "rollback", "runs": [...]}`` / ``{"op": "delete", "thread": t}`` -> ``{}``

Errors come back as ``{"error": "<type>: <message>"}``; the process goes on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from runtime.saver import DeerflowPostgresSaver

_versions = itertools.count(1)


def to_messages(rows: list[list[str]]) -> list[BaseMessage]:
    kinds = {"human": HumanMessage, "ai": AIMessage}
    return [kinds[kind](text, id=message_id) for kind, message_id, text in rows]


def from_messages(messages: list[BaseMessage] | None) -> list[list[Any]] | None:
    if messages is None:
        return None
    return [[m.type, m.id, m.content] for m in messages]


async def handle(saver: DeerflowPostgresSaver, command: dict[str, Any]) -> dict[str, Any]:
    op = command["op"]
    if op == "put":
        checkpoint = empty_checkpoint()
        version = f"{next(_versions):032d}.0.{id(saver) % 997}"
        checkpoint["channel_values"] = {"messages": to_messages(command["messages"])}
        checkpoint["channel_versions"] = {"messages": version}
        configurable: dict[str, Any] = {"thread_id": command["thread"], "checkpoint_ns": ""}
        if command.get("parent"):
            configurable["checkpoint_id"] = command["parent"]
        saved = await saver.aput(
            {"configurable": configurable},
            checkpoint,
            {"source": "loop", "step": 0, "run_id": command["run"]},
            {"messages": version},
        )
        return {"id": saved["configurable"]["checkpoint_id"]}
    if op == "read":
        configurable = {"thread_id": command["thread"], "checkpoint_ns": ""}
        if command.get("checkpoint"):
            configurable["checkpoint_id"] = command["checkpoint"]
        found = await saver.aget_tuple({"configurable": configurable})
        value = None if found is None else found.checkpoint["channel_values"].get("messages")
        return {"messages": from_messages(value)}
    if op == "rollback":
        await saver.adelete_for_runs(command["runs"])
        return {}
    if op == "delete":
        await saver.adelete_thread(command["thread"])
        return {}
    raise ValueError(f"unknown op {op!r}")


async def main(uri: str) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        uri,
        kwargs={"autocommit": True, "prepare_threshold": None, "row_factory": dict_row},
        min_size=1,
        max_size=2,
        open=False,
    )
    await pool.open(wait=True)
    saver = DeerflowPostgresSaver(pool)
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            try:
                reply = await handle(saver, json.loads(line))
            except Exception as exc:
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
