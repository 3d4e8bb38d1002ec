"""Per-step cost of the middleware chain: bare agent vs naive vs fused composition.

Run with ``make bench-chain`` (or ``python -m bench.chain_overhead``). One run
measures, side by side and interleaved round by round (so machine load hits
every variant alike):

- **bare**: ``create_agent`` with the scripted model and the tool, no middleware;
- **full lead chain**: ``build_middlewares`` for the default run config, i.e.
  whatever the real chain holds today, composed naively (``create_agent``'s own
  composition) and fused (``middlewares._fusion``, what the graphs use);
- **full lead chain, skills off**: the same with ``skills.enabled: false``, so
  the marginal cost of SkillActivation/SkillToolPolicy shows in the same run;
- **full lead chain, skill active**: the same chain on a conversation that
  starts with ``/bench-skill ...``, so SkillActivation injects the skill on
  every model call and SkillToolPolicy filters and checks every call;
- **full lead chain + optional middlewares** (``VARIANTS``): governance, memory,
  the long-conversation set in plan mode, deferred tools with tool search and
  view image; each row is what an issue's bound is checked against;
- **synthetic** chains of 30 pass-through middlewares, for a comparison that does
  not move as real middlewares land: wrap hooks only, and a mix of wrap and
  ``before_model``/``after_model`` hooks.

Every agent has an in-memory checkpointer, as under the server. A step is one
model call plus its tool call; the time per step is a conversation's time
divided by its model calls, and each figure is the median over the rounds.
The last line printed is ``chain_overhead_ratio=<full chain (fused) / bare>``;
the table goes to ``bench/results/chain_overhead.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from deerflow_extension_api._plugins import load_extensions
from graphs.prompts import LEAD_SYSTEM_PROMPT
from middlewares._fusion import compose_chain, lazy_chain_spans
from middlewares.chain import ChainInputs, build_middlewares
from runtime.config import load_settings
from runtime.scripted_model import ScriptedChatModel
from runtime.skills import get_skill_registry
from runtime.state import ThreadState

RESULTS = Path(__file__).resolve().parent / "results" / "chain_overhead.md"


@tool
async def echo(text: str) -> str:
    """Return the text (the benchmark's tool)."""
    return text


def _script(steps: int) -> list[dict[str, Any]]:
    calls = [
        {"tool_calls": [{"name": "echo", "args": {"text": f"step {i}"}}]} for i in range(steps)
    ]
    return [*calls, {"content": "done"}]


class _PassThrough(AgentMiddleware[Any, Any, Any]):
    deerflow_fusable = True  # pass-through hooks never interrupt


def _pass_through(index: int, *, wraps: bool, hooks: bool) -> AgentMiddleware[Any, Any]:
    namespace: dict[str, Any] = {}
    if wraps:

        def wrap_model_call(self: Any, request: Any, handler: Any) -> Any:
            return handler(request)

        async def awrap_model_call(self: Any, request: Any, handler: Any) -> Any:
            return await handler(request)

        def wrap_tool_call(self: Any, request: Any, handler: Any) -> Any:
            return handler(request)

        async def awrap_tool_call(self: Any, request: Any, handler: Any) -> Any:
            return await handler(request)

        namespace.update(
            wrap_model_call=wrap_model_call,
            awrap_model_call=awrap_model_call,
            wrap_tool_call=wrap_tool_call,
            awrap_tool_call=awrap_tool_call,
        )
    if hooks:

        async def abefore_model(self: Any, state: Any, runtime: Any) -> Any:
            return None

        async def aafter_model(self: Any, state: Any, runtime: Any) -> Any:
            return None

        namespace.update(abefore_model=abefore_model, aafter_model=aafter_model)
    return type(f"PassThrough{index}", (_PassThrough,), namespace)()


def synthetic_wrap30() -> list[AgentMiddleware[Any, Any]]:
    return [_pass_through(i, wraps=True, hooks=False) for i in range(30)]


def synthetic_mixed30() -> list[AgentMiddleware[Any, Any]]:
    """10 wrap-only, 10 state-hook-only, 10 with both: roughly the spec chain's mix."""
    return [_pass_through(i, wraps=i % 3 != 1, hooks=i % 3 != 0) for i in range(30)]


def _fused(chain: list[AgentMiddleware[Any, Any]]) -> list[AgentMiddleware[Any, Any]]:
    """What graphs/_build.py hands to create_agent (fused, after_model folded)."""
    composed = compose_chain(chain, state_schema=ThreadState, tools=[echo])
    if chain and composed == chain:
        raise SystemExit(
            "the chain was not fused: LangSmith tracing is on or DEERFLOW_CHAIN_FUSION is false"
        )
    return composed


@dataclass
class Case:
    name: str
    label: str
    make_chain: Callable[[], list[AgentMiddleware[Any, Any]]]
    size: int = 0
    prompt: str = "run the steps"


BENCH_SKILL = """\
---
name: bench-skill
description: The benchmark's skill (allowed-tools keeps the bench tool).
allowed-tools: [echo]
---
Call echo once per step, then answer done.
"""


def _agent(model: ScriptedChatModel, middleware: list[AgentMiddleware[Any, Any]]) -> Any:
    with lazy_chain_spans():  # as graphs/_build.py builds (only the fused chain is affected)
        return create_agent(
            model,
            [echo],
            system_prompt=LEAD_SYSTEM_PROMPT,
            middleware=middleware,
            state_schema=ThreadState,
            checkpointer=InMemorySaver(),
            name="lead_agent",
        )


async def _conversation(
    graph: Any, thread: str, steps: int, prompt: str = "run the steps"
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per step of one conversation."""
    config = {"configurable": {"thread_id": thread}, "metadata": {"run_id": f"run-{thread}"}}
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    result = await graph.ainvoke({"messages": [HumanMessage(prompt)]}, config)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if result["messages"][-1].content != "done":
        raise RuntimeError(f"unexpected end of conversation: {result['messages'][-1]!r}")
    return cpu / (steps + 1), wall / (steps + 1)


# Optional middlewares switched on, one config block per variant row.
GOVERNANCE = """
authorization:
  enabled: true
  roles: {member: ['tool:*', 'model:*', 'sandbox:execute']}
  default_role: member
guardrails:
  enabled: true
  rules:
    - {tool: bash, deny_pattern: 'rm\\s+-rf\\s+/'}
    - {tool: echo, max_calls_per_run: 1000}
tool_progress:
  enabled: true
"""
MEMORY = """
memory:
  enabled: true
"""
# Issue 15's long-conversation middlewares, all on, in plan mode (summarization
# never triggers in a 20-step run on a large window: this measures per-step cost).
LONG_CONVERSATION = """
summarization: {enabled: true}
token_usage: {enabled: true}
token_budget: {enabled: true, max_tokens_per_run: 100000000}
"""
# Issue 17's tool middlewares: tool_search on with a configured tool marked
# deferred (no MCP server needed) puts McpRouting, DeferredToolPromotionAudit and
# DeferredToolFilter (27-29) in the chain; a vision model adds ViewImage (26).
# ``models`` repeats the base config's key: the later one wins (PyYAML), so the
# same scripted model is declared vision-capable. The bench agent's own tool is
# not deferred, so the filter runs on every call but hides nothing.
# A configured tool marked deferred, so the deferral middlewares run without an MCP
# server; the variant asks chain_inputs for a vision model (ViewImage joins only then).
DEFERRED_TOOLS = """
tools:
  - {name: web_fetch, group: web, use: 'tools.web:web_fetch', deferred: true}
tool_search: {enabled: true}
"""
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "authorization, guardrails, tool progress": (GOVERNANCE, {}),
    "memory": (MEMORY, {}),
    "summarization, token usage and budget, plan mode": (
        LONG_CONVERSATION,
        {"is_plan_mode": True},
    ),
    "deferred tools, tool search, view image": (DEFERRED_TOOLS, {"vision": True}),
}


def chain_inputs(
    data_root: Path,
    extra: str = "",
    name: str = "bench",
    configurable: dict[str, Any] | None = None,
) -> ChainInputs:
    """A lead run's chain inputs (default config plus ``extra`` YAML), data under ``data_root``.

    ``configurable`` is the run's; its ``vision`` entry (not a run option) marks
    the bench model as a vision model instead.
    """
    configurable = dict(configurable or {})
    vision = ", supports_vision: true" if configurable.pop("vision", False) else ""
    config_path = data_root / f"{name}-config.yaml"
    skill = data_root / "custom-skills" / "bench-skill" / "SKILL.md"
    skill.parent.mkdir(parents=True, exist_ok=True)
    skill.write_text(BENCH_SKILL, encoding="utf-8")
    config_path.write_text(
        f"models:\n  - {{name: scripted, use: 'runtime.scripted_model:ScriptedChatModel'{vision}}}\n"
        f"data_root: {str(data_root)!r}\n"
        f"skills: {{custom_path: {str(skill.parent.parent)!r}}}\n{extra}",
        encoding="utf-8",
    )
    settings = load_settings(config_path)
    load_extensions(settings)
    get_skill_registry(settings)  # read once, before the event loop (as the graph factory does)
    return ChainInputs.from_config(
        settings, {"configurable": {"thread_id": "bench", **configurable}}
    )


def _without_skills(inputs: ChainInputs) -> ChainInputs:
    """The same inputs with the skills feature off: the marginal cost of slots 18/19."""
    skills = inputs.settings.skills.model_copy(update={"enabled": False})
    return dataclasses.replace(
        inputs, settings=inputs.settings.model_copy(update={"skills": skills})
    )


async def measure(
    rounds: int, steps: int, inputs: ChainInputs, variants: dict[str, ChainInputs] | None = None
) -> tuple[list[dict[str, Any]], float, float]:
    model = ScriptedChatModel.model_validate({"script": _script(steps)})

    cases = [
        Case("full", "full lead chain (build_middlewares)", lambda: build_middlewares(inputs)),
        Case(
            "noskills",
            "full lead chain, skills.enabled false (reference)",
            lambda: build_middlewares(_without_skills(inputs)),
        ),
        Case(
            "skills",
            "full lead chain, a skill activated with /bench-skill",
            lambda: build_middlewares(inputs),
            prompt="/bench-skill run the steps",
        ),
        *(
            Case(f"variant{index}", f"full lead chain + {label}", partial(build_middlewares, v))
            for index, (label, v) in enumerate((variants or {}).items())
        ),
        Case("wrap30", "synthetic: 30 pass-through wrap middlewares", synthetic_wrap30),
        Case("mixed30", "synthetic: 30 pass-through, wrap + before/after_model", synthetic_mixed30),
    ]
    graphs: dict[str, Any] = {"bare": _agent(model, [])}
    prompts: dict[str, str] = {"bare": "run the steps"}
    for case in cases:
        prompts[f"{case.name}:naive"] = prompts[f"{case.name}:fused"] = case.prompt
        case.size = len(case.make_chain())
        graphs[f"{case.name}:naive"] = _agent(model, case.make_chain())
        graphs[f"{case.name}:fused"] = _agent(model, _fused(case.make_chain()))
    cpu: dict[str, list[float]] = {key: [] for key in graphs}
    wall: dict[str, list[float]] = {key: [] for key in graphs}
    keys = list(graphs)
    for round_index in range(rounds + 1):  # round 0 warms up and is discarded
        order = keys[round_index % len(keys) :] + keys[: round_index % len(keys)]
        for key in order:
            cpu_step, wall_step = await _conversation(
                graphs[key], f"{key}-{round_index}", steps, prompts[key]
            )
            if round_index:
                cpu[key].append(cpu_step)
                wall[key].append(wall_step)
    cpu_median = {key: statistics.median(values) for key, values in cpu.items()}
    wall_median = {key: statistics.median(values) for key, values in wall.items()}
    bare, bare_wall = cpu_median["bare"], wall_median["bare"]
    rows = []
    for case in cases:
        naive, fused = cpu_median[f"{case.name}:naive"], cpu_median[f"{case.name}:fused"]
        rows.append(
            {
                "case": case.label,
                "middlewares": case.size,
                "bare_ms": bare * 1000,
                "naive_ms": naive * 1000,
                "fused_ms": fused * 1000,
                "naive_ratio": naive / bare,
                "fused_ratio": fused / bare,
                "naive_wall_ratio": wall_median[f"{case.name}:naive"] / bare_wall,
                "fused_wall_ratio": wall_median[f"{case.name}:fused"] / bare_wall,
            }
        )
    return rows, cpu_median["full:fused"] / bare, cpu_median["skills:fused"] / bare


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| case | middlewares | bare ms/step | naive ms/step | fused ms/step "
        "| naive / bare | fused / bare | wall: naive / bare | wall: fused / bare |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['middlewares']} | {r['bare_ms']:.2f} | {r['naive_ms']:.2f} | "
            f"{r['fused_ms']:.2f} | {r['naive_ratio']:.2f}x | {r['fused_ratio']:.2f}x | "
            f"{r['naive_wall_ratio']:.2f}x | {r['fused_wall_ratio']:.2f}x |"
        )
    return "\n".join(lines)


def _report(
    rows: list[dict[str, Any]], ratio: float, skills_ratio: float, rounds: int, steps: int
) -> str:
    versions = ", ".join(f"{p} {version(p)}" for p in ("langchain", "langgraph", "langsmith"))
    return (
        "# Chain overhead\n\n"
        "Written by `make bench-chain` (`bench/chain_overhead.py`). Per-step time of a\n"
        f"scripted conversation ({steps} tool steps and a final answer; in-memory checkpointer;\n"
        f"median of {rounds} interleaved rounds; tracing off). *naive* is `create_agent`'s own\n"
        "composition of the chain, *fused* is what the graphs run (`middlewares/_fusion.py`).\n"
        "Times are the process's CPU time per step (all its threads), which other load on a\n"
        "shared machine does not inflate; wall-clock ratios are shown too (noisier).\n\n"
        f"{_table(rows)}\n\n"
        f"`chain_overhead_ratio={ratio:.2f}` (full lead chain, fused, over the bare agent);\n"
        f"`skills_active_ratio={skills_ratio:.2f}` (the same chain with a skill activated).\n\n"
        "The full lead chain is whatever `build_middlewares` assembles today: the ratio moves\n"
        "as middlewares land (their own work counts too); the synthetic rows do not.\n\n"
        f"Environment: Python {platform.python_version()}, {versions}, {platform.machine()}.\n"
        "Absolute times vary with the machine; compare the ratios.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    os.environ.setdefault("LANGSMITH_TRACING", "false")
    with tempfile.TemporaryDirectory(prefix="deerflow-bench-") as tmp:
        inputs = chain_inputs(Path(tmp))
        variants = {
            label: chain_inputs(Path(tmp), extra, f"variant{index}", configurable)
            for index, (label, (extra, configurable)) in enumerate(VARIANTS.items())
        }
        rows, ratio, skills_ratio = asyncio.run(measure(args.rounds, args.steps, inputs, variants))
    print(_table(rows))
    for r in rows:
        print(f"{r['case']}: naive {r['naive_ratio']:.2f}x, fused {r['fused_ratio']:.2f}x of bare")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        _report(rows, ratio, skills_ratio, args.rounds, args.steps), encoding="utf-8"
    )
    print(f"skills_active_ratio={skills_ratio:.2f}")
    print(f"chain_overhead_ratio={ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
