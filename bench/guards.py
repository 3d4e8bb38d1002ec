"""Cost of the guard middlewares (spec 12 SandboxAudit, 13 ReadBeforeWrite).

Run with ``python -m bench.guards``. One run measures, side by side and
interleaved round by round (so machine load hits every variant alike):

- **classification**: ``classify_command`` over the test corpus, against
  ``shlex.split`` of the same commands as a fixed yardstick;
- **agent steps**: a scripted conversation of ``read_file``/``write_file``/
  ``bash`` steps through ``create_agent`` with no guard, with the audit, and
  with audit + read-before-write (in-memory checkpointer, real file tools on a
  temp data root). A step is one model call plus its tool call.

Figures are medians over the rounds; the table goes to ``bench/results/guards.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "guards.md"


def _shlex_split(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return []


def _classification_round(commands: list[str], repeat: int) -> tuple[float, float]:
    from middlewares.sandbox_audit import classify_command

    start = time.perf_counter()
    for _ in range(repeat):
        for command in commands:
            classify_command(command)
    classify = (time.perf_counter() - start) / (repeat * len(commands))
    start = time.perf_counter()
    for _ in range(repeat):
        for command in commands:
            _shlex_split(command)
    split = (time.perf_counter() - start) / (repeat * len(commands))
    return classify, split


def _script(steps: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for index in range(steps):
        kind = index % 3
        if kind == 0:
            call = {"name": "read_file", "args": {"description": "r", "path": "notes.md"}}
        elif kind == 1:
            call = {
                "name": "write_file",
                "args": {"description": "w", "path": "notes.md", "content": f"v{index}\n"},
            }
        else:
            call = {"name": "bash", "args": {"description": "b", "command": "wc -c notes.md"}}
        turns.append({"tool_calls": [call]})
    turns.append({"content": "done"})
    return turns


def _agent(middleware: list[Any], steps: int) -> Any:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from runtime.scripted_model import ScriptedChatModel
    from runtime.state import ThreadState
    from tests.support import guard_tools

    return create_agent(
        ScriptedChatModel.model_validate({"script": _script(steps)}),
        [guard_tools.bash, guard_tools.read_file, guard_tools.write_file],
        middleware=middleware,
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )


async def _step_time(build: Callable[[], Any], steps: int, label: str, round_no: int) -> float:
    agent = build()
    config = {"configurable": {"thread_id": f"bench-{label}-{round_no}"}}
    start = time.perf_counter()
    await agent.ainvoke({"messages": [("user", "go")]}, config)
    return (time.perf_counter() - start) / (steps + 1)


async def _main(rounds: int, steps: int, repeat: int) -> str:
    with tempfile.TemporaryDirectory() as data_root:
        os.environ["DEERFLOW_DATA_ROOT"] = data_root
        os.environ.pop("DEERFLOW_CONFIG", None)
        from middlewares.read_before_write import ReadBeforeWriteMiddleware
        from middlewares.sandbox_audit import SandboxAuditMiddleware
        from runtime.config import get_settings, reset_settings_cache
        from tests.middlewares.sandbox_audit_corpus import CORPUS

        reset_settings_cache()
        settings = get_settings()
        commands = [case.command for case in CORPUS if len(case.command) < 10_000]
        variants: dict[str, Callable[[], Any]] = {
            "no guard": lambda: _agent([], steps),
            "audit": lambda: _agent([SandboxAuditMiddleware()], steps),
            "audit + read-before-write": lambda: _agent(
                [SandboxAuditMiddleware(), ReadBeforeWriteMiddleware.from_settings(settings)], steps
            ),
        }
        classify_times: list[float] = []
        split_times: list[float] = []
        step_times: dict[str, list[float]] = {name: [] for name in variants}
        for round_no in range(rounds):
            classify, split = _classification_round(commands, repeat)
            classify_times.append(classify)
            split_times.append(split)
            for name, build in variants.items():
                step_times[name].append(await _step_time(build, steps, name, round_no))

    classify = statistics.median(classify_times)
    split = statistics.median(split_times)
    base = statistics.median(step_times["no guard"])
    lines = [
        "# Guard middleware cost",
        "",
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs "
        f"(shared). {rounds} rounds, medians. Command `python -m bench.guards`.",
        "",
        "## classify_command",
        "",
        "| measure | per command | ratio |",
        "| --- | --- | --- |",
        f"| `shlex.split` (yardstick) | {split * 1e6:.1f} µs | 1.00 |",
        f"| `classify_command` ({len(commands)} corpus commands) | {classify * 1e6:.1f} µs "
        f"| {classify / split:.2f} |",
        "",
        f"## Agent step ({steps} tool steps of read_file / write_file / bash)",
        "",
        "| chain | per step | ratio to no guard |",
        "| --- | --- | --- |",
    ]
    for name, times in step_times.items():
        median = statistics.median(times)
        lines.append(f"| {name} | {median * 1e3:.2f} ms | {median / base:.2f} |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    report = asyncio.run(_main(args.rounds, args.steps, args.repeat))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
