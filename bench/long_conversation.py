"""Long conversations: the cost of one compaction and the storage of a 300-turn thread.

Run with ``make bench-long`` (or ``python -m bench.long_conversation``). One run:

- **one compaction**: ``SummarizationMiddleware.aafter_model`` on a history just
  over its trigger (the summary model is the scripted one, so this is the
  middleware's own work: planning, pinning, the summary prompt, the update),
  median over rounds, beside the median time of one full lead-chain step;
- **storage**: the real lead graph (fused chain, in-memory
  ``DeerflowMemorySaver``) plays 6 user runs of 50 model steps each (300 turns)
  on a 2,500-token window, with summarization on and off, interleaved; the
  bytes the saver holds for the thread after each run are recorded.

Writes ``bench/results/long_conversation.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from bench.checkpointer import memory_bytes
from graphs.lead_agent import build_lead_agent
from middlewares.summarization import SummarizationMiddleware
from runtime.config import load_settings
from runtime.memory_saver import DeerflowMemorySaver
from runtime.scripted_model import ScriptedChatModel

RESULTS = Path(__file__).resolve().parent / "results" / "long_conversation.md"
WINDOW = 2500
_FILLER = "a line of tool output that fills the context " * 6


def _config(directory: Path, *, summarization: bool, steps: int) -> Path:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "args": {"text": f"step {n}: {_FILLER}"}}]}
        for n in range(steps - 1)
    ]
    script.append({"content": "All steps done."})
    data = {
        "models": [
            {
                "name": "run",
                "use": "runtime.scripted_model:ScriptedChatModel",
                "script": script,
                "turn_by": "calls",
                "context_window": WINDOW,
            },
            {
                "name": "summarizer",
                "use": "runtime.scripted_model:ScriptedChatModel",
                "script": [{"content": "Summary: the agent echoed many steps."}],
                "turn_by": "calls",
                "cycle_from": 0,
            },
        ],
        "data_root": str(directory / "data"),
        "tools": [{"name": "echo", "use": "bench.chain_overhead:echo"}],
        "subagents": {"enabled": False},
        "loop_detection": {"enabled": False},
        "summarization": {
            "enabled": summarization,
            "model": "summarizer",
            "trigger_fraction": 0.6,
            "keep_fraction": 0.25,
        },
    }
    path = directory / f"long-{summarization}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


async def _run(settings: Any, saver: DeerflowMemorySaver, thread: str, run: int) -> float:
    config: dict[str, Any] = {
        "configurable": {"thread_id": thread, "run_id": f"{thread}-{run}"},
        "recursion_limit": 2000,
    }
    graph = build_lead_agent(settings, config)  # type: ignore[arg-type]
    graph.checkpointer = saver
    started = time.perf_counter()
    result = await graph.ainvoke({"messages": [HumanMessage(f"request {run}")]}, config)  # type: ignore[call-overload]
    if result["messages"][-1].text != "All steps done.":
        raise RuntimeError(f"unexpected end: {result['messages'][-1]!r}")
    return time.perf_counter() - started


async def storage(directory: Path, runs: int, steps: int) -> dict[str, Any]:
    variants = {
        "summarization on": load_settings(_config(directory, summarization=True, steps=steps)),
        "summarization off": load_settings(_config(directory, summarization=False, steps=steps)),
    }
    savers = {name: DeerflowMemorySaver() for name in variants}
    threads = {name: str(uuid.uuid4()) for name in variants}
    sizes: dict[str, list[int]] = {name: [] for name in variants}
    seconds: dict[str, float] = dict.fromkeys(variants, 0.0)
    for run in range(runs):
        for name, settings in variants.items():
            seconds[name] += await _run(settings, savers[name], threads[name], run)
            sizes[name].append(memory_bytes(savers[name], threads[name]))
    return {"sizes": sizes, "seconds": seconds}


def _history(steps: int) -> list[Any]:
    messages: list[Any] = [HumanMessage("request", id="u")]
    for n in range(steps):
        call = {"name": "echo", "args": {"text": f"step {n}: {_FILLER}"}, "id": f"c{n}"}
        messages.append(AIMessage("", tool_calls=[call], id=f"a{n}"))
        messages.append(ToolMessage(f"echo: {_FILLER}", tool_call_id=f"c{n}", id=f"t{n}"))
    messages.append(AIMessage("", tool_calls=[{"name": "echo", "args": {}, "id": "last"}], id="z"))
    return messages


async def compaction(rounds: int) -> dict[str, float]:
    model = ScriptedChatModel.model_validate({"script": [{"content": "Summary."}], "cycle_from": 0})
    middleware = SummarizationMiddleware(
        model=model,
        summary_model=model,
        trigger_tokens=int(WINDOW * 0.6),
        keep_tokens=int(WINDOW * 0.25),
    )
    state = {"messages": _history(12)}
    times = []
    update: dict[str, Any] | None = None
    for _ in range(rounds + 1):
        started = time.perf_counter()
        update = await middleware.aafter_model(state, None)  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
        if update is None:
            raise RuntimeError("the prepared history did not trigger a compaction")
    before = len(state["messages"])
    assert update is not None
    return {
        "compaction_ms": statistics.median(times[1:]) * 1000,
        "messages_before": before,
        "messages_after": len(update["messages"]) - 1,
    }


def _report(result: dict[str, Any], cost: dict[str, float], runs: int, steps: int) -> str:
    sizes, seconds = result["sizes"], result["seconds"]
    names = list(sizes)
    header = "| after run | turns | " + " | ".join(f"{n} (KiB)" for n in names) + " |"
    lines = [header, "| ---: | ---: |" + " ---: |" * len(names)]
    for run in range(runs):
        cells = " | ".join(f"{sizes[n][run] / 1024:.0f}" for n in names)
        lines.append(f"| {run + 1} | {(run + 1) * steps} | {cells} |")
    growth = {n: [b - a for a, b in zip(sizes[n], sizes[n][1:], strict=False)] for n in names}
    per_step = {n: (seconds[n] / (runs * steps)) * 1000 for n in names}
    versions = ", ".join(f"{p} {version(p)}" for p in ("langchain", "langgraph"))
    return (
        "# Long conversations\n\n"
        "Written by `make bench-long` (`bench/long_conversation.py`).\n\n"
        "## One compaction\n\n"
        f"`SummarizationMiddleware.aafter_model` on {cost['messages_before']:.0f} messages "
        f"just over a {int(WINDOW * 0.6)}-token trigger (scripted summary model): "
        f"**{cost['compaction_ms']:.2f} ms** median; the thread keeps "
        f"{cost['messages_after']:.0f} messages (summary included). A real summary model "
        "call comes on top.\n\n"
        f"## Storage of a {runs * steps}-turn thread\n\n"
        f"The lead graph (fused chain, `DeerflowMemorySaver`), {runs} user runs of {steps} "
        f"model steps, a {WINDOW}-token window; bytes the saver holds after each run.\n\n"
        + "\n".join(lines)
        + "\n\n"
        + "\n".join(
            f"- {n}: growth per run {', '.join(f'{g / 1024:.0f}' for g in growth[n])} KiB; "
            f"{per_step[n]:.1f} ms per model step"
            for n in names
        )
        + "\n\nWith summarization the per-run growth stays flat (storage linear in turns); "
        "without it every checkpoint carries the whole history.\n\n"
        f"Environment: Python {platform.python_version()}, {versions}, {platform.machine()}.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    os.environ.setdefault("LANGSMITH_TRACING", "false")
    with tempfile.TemporaryDirectory(prefix="deerflow-bench-") as tmp:
        result = asyncio.run(storage(Path(tmp), args.runs, args.steps))
    cost = asyncio.run(compaction(args.rounds))
    report = _report(result, cost, args.runs, args.steps)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
