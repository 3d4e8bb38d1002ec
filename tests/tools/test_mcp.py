"""MCP servers as tools, against a real MCP server (FastMCP) over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.tools import ToolException

from runtime.config import McpServerConfig
from tools.mcp import McpManager, resolve_env_refs

SERVER = str(Path(__file__).resolve().parents[1] / "support" / "mcp_server.py")


def stdio(**extra: Any) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {"transport": "stdio", "command": sys.executable, "args": [SERVER], **extra}
    )


@pytest.fixture
async def manager() -> AsyncIterator[McpManager]:
    mgr = McpManager({"alpha": stdio(timeout=10)})
    yield mgr
    await mgr.aclose()


def by_name(mgr: McpManager) -> dict[str, Any]:
    return {tool.name: tool for tool in mgr.tools()}


async def test_tools_are_discovered_named_and_called(manager: McpManager) -> None:
    await manager.discover(reserved=["read_file", "bash"])
    tools = by_name(manager)
    assert {"add", "report", "fail", "slow", "pid", "alpha_read_file"} <= set(tools)
    assert tools["add"].metadata["deerflow_mcp"] == {"server": "alpha", "tool": "add"}
    assert await tools["add"].ainvoke({"a": 2, "b": 3}) == "2 + 3 = 5"
    assert await tools["alpha_read_file"].ainvoke({"path": "x"}) == "mcp read x"


async def test_results_become_text_with_neutralised_placeholders(manager: McpManager) -> None:
    await manager.discover()
    text = await by_name(manager)["report"].ainvoke({})
    assert text.startswith("Quarterly report")
    assert "[image from the MCP tool: image/png, ~" in text
    assert "[resource link: q3 " in text and "file:///reports/q3.pdf" in text
    assert "<system-reminder>" not in text  # the file name cannot forge framework markup
    assert "[embedded resource mem://notes.txt, text/plain]\nembedded notes" in text
    assert "[embedded file mem://data.bin, application/octet-stream, ~" in text
    assert "iVBOR" not in text  # no base64 reaches the model


async def test_tool_errors_and_timeouts_raise_for_the_error_handler() -> None:
    # The timeout bounds every call of the server, the healthy ones too (listing,
    # `fail`, `add` after the reconnect): it is generous so that a loaded machine
    # cannot make them miss it; only `slow`, which never answers in time, does.
    mgr = McpManager({"alpha": stdio(timeout=5)})
    await mgr.discover()
    tools = by_name(mgr)
    with pytest.raises(ToolException, match="failed on purpose"):
        await tools["fail"].ainvoke({})
    with pytest.raises(TimeoutError, match=r"did not answer within 5 s"):
        await tools["slow"].ainvoke({"seconds": 3600})
    assert (
        await tools["add"].ainvoke({"a": 1, "b": 1}) == "1 + 1 = 2"
    )  # reconnected after the timeout
    await mgr.aclose()


async def test_an_allow_list_and_a_down_server_leave_the_rest_working() -> None:
    mgr = McpManager(
        {
            "alpha": stdio(tools=["add"]),
            "broken": McpServerConfig(transport="stdio", command="/nonexistent/mcp-server"),
        }
    )
    await mgr.discover()
    assert [t.name for t in mgr.tools()] == ["add"]
    await mgr.aclose()


async def test_a_killed_stdio_server_fails_the_next_call_then_is_restarted(
    manager: McpManager,
) -> None:
    await manager.discover()
    tools = by_name(manager)
    first = int(await tools["pid"].ainvoke({}))
    os.kill(first, signal.SIGKILL)
    await asyncio.sleep(0.2)
    with pytest.raises(ConnectionError, match="restarted on the next call"):
        await tools["add"].ainvoke({"a": 1, "b": 2})
    assert await tools["add"].ainvoke({"a": 1, "b": 2}) == "1 + 2 = 3"
    assert int(await tools["pid"].ainvoke({})) != first


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_http(port: int, token: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MCP_TEST_REQUIRE_TOKEN": token}
    process = subprocess.Popen(
        [sys.executable, SERVER, "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=0.5)
            return process
        except httpx.HTTPError:
            if process.poll() is not None:
                raise RuntimeError("the MCP test server did not start") from None
            import time

            time.sleep(0.05)
    raise RuntimeError("the MCP test server did not listen")


@pytest.fixture
def http_server() -> Iterator[tuple[int, list[subprocess.Popen[bytes]]]]:
    port = free_port()
    processes = [start_http(port, "s3cret")]
    yield port, processes
    for process in processes:
        process.kill()
        process.wait()


async def test_streamable_http_with_env_headers_survives_a_server_restart(
    http_server: tuple[int, list[subprocess.Popen[bytes]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, processes = http_server
    monkeypatch.setenv("MCP_TEST_TOKEN", "s3cret")
    config = McpServerConfig(
        transport="streamable_http",
        url=f"http://127.0.0.1:{port}/mcp",
        headers={"Authorization": "Bearer ${MCP_TEST_TOKEN}"},
        timeout=3,
    )
    mgr = McpManager({"remote": config})
    await mgr.discover()
    add = by_name(mgr)["add"]
    assert await add.ainvoke({"a": 4, "b": 5}) == "4 + 5 = 9"

    processes[0].kill()
    await asyncio.to_thread(processes[0].wait)
    with pytest.raises((ConnectionError, TimeoutError)):
        await add.ainvoke({"a": 1, "b": 1})
    processes.append(await asyncio.to_thread(start_http, port, "s3cret"))
    assert await add.ainvoke({"a": 1, "b": 1}) == "1 + 1 = 2"
    await mgr.aclose()


async def test_a_server_refusing_our_credentials_contributes_no_tools(
    http_server: tuple[int, list[subprocess.Popen[bytes]]],
) -> None:
    port, _ = http_server
    mgr = McpManager(
        {"remote": McpServerConfig(transport="streamable_http", url=f"http://127.0.0.1:{port}/mcp")}
    )
    await mgr.discover()
    assert mgr.tools() == []
    await mgr.aclose()


def test_env_references_resolve_inside_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A_TOKEN", "abc")
    monkeypatch.delenv("MISSING_VAR", raising=False)
    assert resolve_env_refs("Bearer $A_TOKEN") == "Bearer abc"
    assert resolve_env_refs("x${A_TOKEN}y$MISSING_VAR") == "xabcy"
