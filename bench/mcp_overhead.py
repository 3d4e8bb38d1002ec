"""Per-call cost of an MCP tool through the agent's tool wrapper vs the raw MCP client.

Run with ``python -m bench.mcp_overhead``. One stdio MCP server (the tests'
FastMCP server), two ways to call its ``add`` tool, interleaved call by call:

- **raw**: ``mcp.ClientSession.call_tool`` on an open session;
- **tool**: the ``BaseTool`` the agents get (``tools.mcp``): argument
  validation, the manager's session lookup and timeout, result conversion.

Results go to ``bench/results/mcp_overhead.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path

from langchain_mcp_adapters.sessions import create_session

from runtime.config import McpServerConfig
from tools.mcp import McpManager

RESULTS = Path(__file__).resolve().parent / "results" / "mcp_overhead.md"
SERVER = Path(__file__).resolve().parents[1] / "tests" / "support" / "mcp_server.py"


async def measure(calls: int) -> dict[str, float]:
    connection = {"transport": "stdio", "command": sys.executable, "args": [str(SERVER)]}
    manager = McpManager({"bench": McpServerConfig.model_validate(connection)})
    await manager.discover()
    tool = next(t for t in manager.tools() if t.name == "add")
    raw: list[float] = []
    wrapped: list[float] = []
    async with create_session(connection) as session:  # type: ignore[arg-type]
        await session.initialize()
        for i in range(calls + 10):  # the first 10 warm up
            start = time.perf_counter()
            await session.call_tool("add", {"a": i, "b": 1})
            middle = time.perf_counter()
            await tool.ainvoke({"a": i, "b": 1})
            end = time.perf_counter()
            if i >= 10:
                raw.append(middle - start)
                wrapped.append(end - middle)
    await manager.aclose()
    r, w = statistics.median(raw) * 1000, statistics.median(wrapped) * 1000
    return {"raw_ms": r, "tool_ms": w, "ratio": w / r, "overhead_ms": w - r}


def report(result: dict[str, float], calls: int) -> str:
    return (
        "# MCP tool call overhead\n\n"
        f"Written by `python -m bench.mcp_overhead`; median of {calls} interleaved calls of a\n"
        "stdio MCP server's `add` tool (the tests' FastMCP server).\n\n"
        "| path | ms per call | vs raw |\n| --- | ---: | ---: |\n"
        f"| raw `ClientSession.call_tool` | {result['raw_ms']:.3f} | 1.00x |\n"
        f"| the agent's MCP tool (`tools.mcp`) | {result['tool_ms']:.3f} | {result['ratio']:.2f}x |\n\n"
        f"Overhead per call: {result['overhead_ms']:.3f} ms (argument validation, session\n"
        "lookup, timeout, result conversion). Both paths share one server process.\n\n"
        f"Environment: Python {platform.python_version()}, {platform.machine()}.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.calls))
    text = report(result, args.calls)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(text)
    print(f"mcp_overhead_ratio={result['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
