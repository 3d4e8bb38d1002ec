"""Long-term memory: recall latency at 1,000 memories and extraction throughput.

Run with ``python -m bench.memory``. Side by side in one run:

- **recall** of 5 memories out of 1,000 for one user, by keywords (the default)
  and semantically through the store's embedding index (``HashingEmbeddings``),
  next to a plain ``store.asearch`` listing of the same namespace, median of
  interleaved rounds;
- **extraction** of 200 conversations (50 users x 4 threads) through the real
  queue with a scripted extraction model (structured output parsing, validation,
  store writes), next to the same number of raw ``store.aput`` calls.

Results go to ``bench/results/memory.md``. Absolute times vary with the machine;
compare the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from langgraph.store.memory import InMemoryStore

from memory.embeddings import HashingEmbeddings
from memory.extraction import extract_memories
from memory.queue import MemoryJob, MemoryQueue
from memory.recall import recall_block
from memory.records import add_memory, memory_namespace
from runtime.scripted_model import ScriptedChatModel

RESULTS = Path(__file__).resolve().parent / "results" / "memory.md"
_TOPICS = ["deploys", "coffee", "kubernetes", "python", "billing", "teal", "vim", "tests"]


async def _filled(store: InMemoryStore, count: int, *, indexed: bool) -> None:
    for i in range(count):
        topic = _TOPICS[i % len(_TOPICS)]
        await add_memory(store, "u", f"Fact {i} about {topic} and item {i * 7}", indexed=indexed)


async def _timed(call: Any, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def recall(rounds: int, count: int) -> dict[str, float]:
    plain = InMemoryStore()
    indexed = InMemoryStore(
        index={"dims": 256, "embed": HashingEmbeddings(256), "fields": ["content"]}
    )
    await _filled(plain, count, indexed=False)
    await _filled(indexed, count, indexed=True)
    query = "what do I use for kubernetes deploys?"

    async def listing() -> None:
        await plain.asearch(memory_namespace("u"), limit=1000)

    async def keywords() -> None:
        await recall_block(plain, "u", query, limit=5, max_chars=1500, semantic=False, timeout=5)

    async def semantic() -> None:
        await recall_block(indexed, "u", query, limit=5, max_chars=1500, semantic=True, timeout=5)

    results: dict[str, list[float]] = {"listing": [], "keywords": [], "semantic": []}
    for _ in range(rounds):
        for name, call in (("listing", listing), ("keywords", keywords), ("semantic", semantic)):
            results[name].append(await _timed(call, 1))
    return {name: statistics.median(values) * 1000 for name, values in results.items()}


async def extraction(conversations: int) -> dict[str, float]:
    script = [
        {
            "tool_calls": [
                {
                    "name": "MemoryUpdate",
                    "args": {"add": [{"content": "Prefers teal", "category": "preference"}]},
                }
            ]
        }
    ]
    model = ScriptedChatModel.model_validate({"script": script})
    store = InMemoryStore()
    queue = MemoryQueue(debounce_seconds=0)
    turns = [("user", "I like teal, remember that."), ("assistant", "Noted.")]
    start = time.perf_counter()
    for i in range(conversations):
        user, thread = f"user{i % 50}", f"thread{i}"

        async def run(user: str = user, thread: str = thread) -> None:
            await extract_memories(
                model,
                store,
                user,
                turns,
                thread_id=thread,
                max_chars=500,
                max_memories=1000,
                indexed=False,
            )

        queue.submit(MemoryJob(user_id=user, thread_id=thread, run=run))
    await queue.flush()
    extracted = time.perf_counter() - start
    await queue.drain()
    raw_store = InMemoryStore()
    start = time.perf_counter()
    for i in range(conversations):
        await raw_store.aput(("u", str(i % 50), "memories"), f"k{i}", {"content": "Prefers teal"})
    raw = time.perf_counter() - start
    return {
        "conversations": conversations,
        "per_second": conversations / extracted,
        "ms_each": extracted / conversations * 1000,
        "raw_put_ms": raw / conversations * 1000,
        "completed": queue.completed,
    }


def report(recalled: dict[str, float], extracted: dict[str, float], count: int) -> str:
    listing = recalled["listing"]
    return (
        "# Long-term memory\n\n"
        "Written by `python -m bench.memory` (`bench/memory.py`), in-memory store.\n\n"
        f"## Recall of 5 memories out of {count} (median of interleaved rounds)\n\n"
        "| what | ms | vs. listing the namespace |\n| --- | ---: | ---: |\n"
        f"| `store.asearch` listing ({count} items) | {listing:.2f} | 1.00x |\n"
        f"| keyword recall (rank by overlap, recency) | {recalled['keywords']:.2f} | "
        f"{recalled['keywords'] / listing:.2f}x |\n"
        f"| semantic recall (store index, HashingEmbeddings 256) | {recalled['semantic']:.2f} | "
        f"{recalled['semantic'] / listing:.2f}x |\n\n"
        "Recall runs once per run (the block is cached for the run's later model calls) "
        "and is bounded by `memory.recall_timeout_seconds` (5 s).\n\n"
        f"## Extraction of {extracted['conversations']:.0f} conversations through the queue\n\n"
        "| what | per conversation ms | conversations/s |\n| --- | ---: | ---: |\n"
        f"| queue + scripted structured-output model + validation + store writes | "
        f"{extracted['ms_each']:.2f} | {extracted['per_second']:.0f} |\n"
        f"| raw `store.aput` only | {extracted['raw_put_ms']:.3f} | "
        f"{1000 / extracted['raw_put_ms']:.0f} |\n\n"
        "A real extraction model adds its own latency per conversation; the queue runs "
        "extraction off the request path, so runs never wait for it.\n\n"
        f"Environment: Python {platform.python_version()}, {platform.machine()}.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    recalled = asyncio.run(recall(args.rounds, args.memories))
    extracted = asyncio.run(extraction(args.conversations))
    text = report(recalled, extracted, args.memories)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(text)
    print(f"memory_recall_ms={recalled['keywords']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
