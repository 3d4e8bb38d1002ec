"""Costs of the reliability middlewares, measured side by side in one run.

1. Per-step time of a scripted tool loop: bare ``create_agent`` vs the same agent
   with the reliability middlewares of the assembled chain, vs pass-through
   middlewares with exactly the same hooks (what the framework's per-hook cost is,
   without our logic). Ratios to bare.
2. ToolOutputBudget on big outputs: externalising 20 MB of text (hash, write,
   synopsis) and a CSV under the 5,000,000-byte counting guard.

Run: ``.venv/bin/python -m bench.reliability_boundary`` (writes
``bench/results/reliability_boundary.md``).
"""

from __future__ import annotations

import asyncio
import csv
import io
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from middlewares.chain import ChainInputs, build_middlewares
from middlewares.tool_output_budget import externalize_output
from middlewares.tool_output_synopsis import count_table_records, recognize_table
from runtime.config import ModelConfig, Settings, ToolOutputConfig
from runtime.run_options import resolve_run_options
from runtime.scripted_model import ScriptedChatModel
from runtime.state import ThreadState

STEPS = 20
REPEATS = 15
RESULTS = Path(__file__).parent / "results" / "reliability_boundary.md"


@tool
async def echo(text: str) -> str:
    """Echo (bench tool)."""
    return f"echo: {text}"


def _script() -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "echo", "args": {"text": f"step {i}"}}]} for i in range(STEPS)
    ]
    return [*turns, {"content": "done"}]


def _agent(middleware: list[Any]) -> Any:
    model = ScriptedChatModel.model_validate({"script": _script()})
    return create_agent(
        model, [echo], middleware=middleware, state_schema=ThreadState, checkpointer=InMemorySaver()
    )


async def _per_step_ms(chains: dict[str, list[Any]]) -> dict[str, float]:
    """Median per-step time of each chain, sampled round-robin so load hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in chains}
    for repeat in range(REPEATS):
        for name, middleware in chains.items():
            agent = _agent(middleware)
            config = {"configurable": {"thread_id": f"bench-{name}-{repeat}"}}
            start = time.perf_counter()
            await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
            samples[name].append((time.perf_counter() - start) * 1000 / (STEPS + 1))
    return {name: statistics.median(values) for name, values in samples.items()}


_HOOKS = (
    ("wrap_model_call", "awrap_model_call"),
    ("wrap_tool_call", "awrap_tool_call"),
    ("after_model", "aafter_model"),
)


def _pass_through_twin(middleware: AgentMiddleware[Any, Any]) -> AgentMiddleware[Any, Any]:
    """A middleware with the same hooks as ``middleware`` that only calls through."""

    async def amodel(self: Any, request: Any, handler: Any) -> Any:
        return await handler(request)

    def model(self: Any, request: Any, handler: Any) -> Any:
        return handler(request)

    async def aafter(self: Any, state: Any, runtime: Any) -> None:
        return None

    def after(self: Any, state: Any, runtime: Any) -> None:
        return None

    impls = {
        "wrap_model_call": model,
        "awrap_model_call": amodel,
        "wrap_tool_call": model,
        "awrap_tool_call": amodel,
        "after_model": after,
        "aafter_model": aafter,
    }
    namespace: dict[str, Any] = {}
    for sync, async_ in _HOOKS:
        if getattr(type(middleware), sync) is not getattr(AgentMiddleware, sync):
            namespace[sync] = impls[sync]
            namespace[async_] = impls[async_]
    cls = type(f"PassThrough{type(middleware).__name__}", (AgentMiddleware,), namespace)
    return cls()  # type: ignore[no-any-return]


def _csv(target_bytes: int) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", "name", "comment"])
    row = 0
    while buffer.tell() < target_bytes:
        writer.writerow([row, f"n{row}", "two\nlines" if row % 3 == 0 else "plain"])
        row += 1
    return buffer.getvalue()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_root=tmp)
        inputs = ChainInputs(
            settings=settings,
            options=resolve_run_options(None),
            model=ModelConfig(name="bench", use="runtime.scripted_model:ScriptedChatModel"),
        )
        chain = build_middlewares(inputs)
        await _per_step_ms({"warm-up": chain})
        timings = await _per_step_ms(
            {"bare": [], "twins": [_pass_through_twin(m) for m in chain], "chain": chain}
        )
        bare, twins, reliability = timings["bare"], timings["twins"], timings["chain"]

        text = "".join(f"log line {i:09d} with some words in it\n" for i in range(500_000))
        text = (text * 2)[: 20 * 1024 * 1024]
        start = time.perf_counter()
        externalize_output(
            text,
            tool_name="bench",
            tool_call_id="c",
            outputs_dir=Path(tmp) / "outputs",
            config=ToolOutputConfig(),
        )
        externalize_s = time.perf_counter() - start

        table_text = _csv(4_900_000)
        shape = recognize_table(table_text)
        assert shape is not None
        start = time.perf_counter()
        counted = count_table_records(table_text, shape)
        count_s = time.perf_counter() - start
        assert counted.records is not None

    lines = [
        "# Reliability boundary costs",
        "",
        f"Scripted tool loop, {STEPS} tool steps + 1 answer, median of {REPEATS} runs.",
        "",
        "| agent | ms per step | ratio to bare |",
        "| --- | --- | --- |",
        f"| bare create_agent | {bare:.2f} | 1.00 |",
        f"| pass-through twins (same {len(chain)} hook sets, no logic) | {twins:.2f} | {twins / bare:.2f} |",
        f"| with the reliability chain ({len(chain)} middlewares) | {reliability:.2f} | {reliability / bare:.2f} |",
        "",
        "| ToolOutputBudget work | seconds | throughput |",
        "| --- | --- | --- |",
        f"| externalise 20 MiB text (hash + write + synopsis) | {externalize_s:.3f} | {20 / externalize_s:.0f} MiB/s |",
        f"| count a 4.9 MB CSV ({counted.records:,} records) | {count_s:.3f} | {4.9 / count_s:.0f} MB/s |",
        "",
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    print(f"reliability_chain_ratio={reliability / bare:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
