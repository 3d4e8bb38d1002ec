"""Delegation cost: in-process vs remote subagents, against doing the work directly.

Run: ``.venv/bin/python bench/subagent_overhead.py`` (writes ``bench/results/subagent_overhead.md``).

Three scenarios run side by side on one in-process LangGraph Server, each a lead
run whose three units of work are one ``echo`` tool call and one answer:

- ``direct``: the lead makes the three ``echo`` calls itself (no subagents);
- ``inprocess``: the lead delegates three ``task`` calls, run in its process;
- ``remote``: the same three tasks as runs of the ``subagent`` graph on the server.

Time is measured inside each run, from its first streamed event (the run has
left the queue) to its last, so the lead's own queue wait is excluded while a
remote child's queue wait is included (it is part of what remote mode costs).
Reported: the median over the repetitions and the ratios between scenarios.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANGSMITH_TRACING", "false")

from runtime.config import reset_settings_cache  # noqa: E402
from tests.support.delegation import delegation_config, streaming_client, task_call  # noqa: E402
from tests.support.scripted import ai_text, ai_tools, tool_call  # noqa: E402
from tests.support.server import in_process_server  # noqa: E402

REPEATS = 7
WORKER = [ai_tools(tool_call("echo", text="x")), ai_text("worker done")]
SCENARIOS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "direct": (
        [ai_tools(*(tool_call("echo", text=f"{i}") for i in range(3))), ai_text("done")],
        {"enabled": False},
    ),
    "inprocess": (
        [ai_tools(*(task_call(f"part {i}") for i in range(3))), ai_text("done")],
        {"execution": "inprocess"},
    ),
    "remote": (
        [ai_tools(*(task_call(f"part {i}") for i in range(3))), ai_text("done")],
        {"execution": "remote"},
    ),
}


def use(path: Path) -> None:
    os.environ["DEERFLOW_CONFIG"] = str(path)
    reset_settings_cache()


async def one_run(client: Any) -> float:
    thread = await client.threads.create()
    started: float | None = None
    async for part in client.runs.stream(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "go"}]},
        stream_mode="values",
    ):
        if started is None:
            started = time.perf_counter()
        if part.event == "error":
            raise RuntimeError(part.data)
    assert started is not None
    return time.perf_counter() - started


async def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="deerflow-bench-"))
    configs = {}
    for name, (lead, subagents) in SCENARIOS.items():
        directory = workdir / name
        directory.mkdir()
        configs[name] = delegation_config(directory, lead=lead, worker=WORKER, **subagents)
    timings: dict[str, list[float]] = {name: [] for name in SCENARIOS}
    async with in_process_server() as app:
        client = streaming_client(app)
        for name in SCENARIOS:  # warm-up: imports, first builds
            use(configs[name])
            await one_run(client)
        for _ in range(REPEATS):  # interleaved, so drift hits every scenario alike
            for name in SCENARIOS:
                use(configs[name])
                timings[name].append(await one_run(client))
    medians = {name: statistics.median(values) for name, values in timings.items()}
    lines = [
        "# Subagent delegation cost",
        "",
        "`bench/subagent_overhead.py`: one lead run with three units of work (an `echo` call and",
        "an answer each), done directly, delegated in-process, or delegated as remote",
        f"runs on the same in-process LangGraph Server; median of {REPEATS} interleaved runs,",
        "timed from the lead run's first streamed event to its last.",
        "",
        "| scenario | median per lead run (ms) |",
        "| --- | --- |",
        *(f"| {name} | {medians[name] * 1000:.1f} |" for name in SCENARIOS),
        "",
        f"inprocess_over_direct={medians['inprocess'] / medians['direct']:.2f}",
        f"remote_over_inprocess={medians['remote'] / medians['inprocess']:.2f}",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    out = ROOT / "bench" / "results" / "subagent_overhead.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    asyncio.run(main())
