"""Content probes: host layout and any ``SandboxProvider`` (the integration hook)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langchain.tools import ToolRuntime
from langchain_core.tools import StructuredTool

from middlewares._content_probe import (
    ContentProbe,
    HostPathContentProbe,
    ProbeTarget,
    SandboxContentProbe,
    normalize_virtual_path,
)
from middlewares.read_before_write import (
    READ_MARK_KEY,
    WRITE_BLOCK_KEY,
    ReadBeforeWriteMiddleware,
    default_content_probe,
)
from runtime.config import get_settings
from sandbox.base import CommandResult, GrepMatch, Sandbox, SandboxError, SandboxProvider
from tests.support.guard_agents import make_agent, run_config, tool_messages
from tests.support.scripted import ai_text, ai_tools, tool_call


class MemorySandbox(Sandbox):
    """A complete in-memory implementation of the sandbox contract."""

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(sandbox_id)
        self.files: dict[str, bytes] = {}

    async def execute_command(
        self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> CommandResult:
        return CommandResult(output="", exit_code=0)

    async def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        return (await self.download_bytes(path)).decode()

    async def write_file(self, path: str, content: str, append: bool = False) -> None:
        before = self.files.get(path, b"") if append else b""
        self.files[path] = before + content.encode()

    async def list_dir(self, path: str, max_depth: int = 2) -> list[str]:
        return sorted(p for p in self.files if p.startswith(path))

    async def glob(self, pattern: str, path: str) -> list[str]:
        return []

    async def grep(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        max_results: int = 100,
    ) -> list[GrepMatch]:
        return []

    async def upload_bytes(self, path: str, data: bytes) -> None:
        self.files[path] = data

    async def download_bytes(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(path) from None


class MemoryProvider(SandboxProvider):
    def __init__(self) -> None:
        self.sandboxes: dict[str, MemorySandbox] = {}
        self.acquired: list[tuple[str, str]] = []

    async def acquire(self, thread_id: str, *, user_id: str) -> str:
        self.acquired.append((user_id, thread_id))
        sandbox_id = f"{user_id}-{thread_id}"
        self.sandboxes.setdefault(sandbox_id, MemorySandbox(sandbox_id))
        return sandbox_id

    def get(self, sandbox_id: str) -> Sandbox | None:
        return self.sandboxes.get(sandbox_id)

    async def release(self, sandbox_id: str) -> None:
        return None

    async def reset(self) -> None:
        self.sandboxes.clear()


def _target(**overrides: Any) -> ProbeTarget:
    values: dict[str, Any] = {
        "path": "/mnt/user-data/workspace/a.txt",
        "user_id": "alice",
        "thread_id": "t1",
        "sandbox_id": None,
    }
    values.update(overrides)
    return ProbeTarget(**values)


def test_normalize_virtual_path() -> None:
    assert normalize_virtual_path("a.txt") == "/mnt/user-data/workspace/a.txt"
    assert normalize_virtual_path(" ./x/../a.txt ") == "/mnt/user-data/workspace/a.txt"
    assert normalize_virtual_path("//mnt/user-data/outputs/r.md") == "/mnt/user-data/outputs/r.md"
    assert normalize_virtual_path("/mnt/user-data/workspace/../../../etc/passwd") == "/etc/passwd"


def test_both_probes_satisfy_the_protocol() -> None:
    assert isinstance(HostPathContentProbe(Path(".")), ContentProbe)
    assert isinstance(SandboxContentProbe(MemoryProvider()), ContentProbe)
    assert isinstance(default_content_probe(get_settings()), HostPathContentProbe)


async def test_sandbox_probe_acquires_when_no_sandbox_is_known_yet() -> None:
    provider = MemoryProvider()
    sandbox_id = await provider.acquire("t1", user_id="alice")
    await provider.sandboxes[sandbox_id].upload_bytes("/mnt/user-data/workspace/a.txt", b"hello")
    probe = SandboxContentProbe(lambda: provider)
    expected = hashlib.sha256(b"hello").hexdigest()
    assert await probe.adigest(_target()) == expected
    assert await probe.adigest(_target(sandbox_id=sandbox_id)) == expected
    assert provider.acquired == [("alice", "t1"), ("alice", "t1")]
    with pytest.raises(FileNotFoundError):
        await probe.adigest(_target(path="/mnt/user-data/workspace/missing"))
    with pytest.raises(SandboxError):
        await probe.adigest(_target(thread_id=None))


async def test_sandbox_probe_sync_twin_works_inside_and_outside_a_loop() -> None:
    provider = MemoryProvider()
    sandbox_id = await provider.acquire("t1", user_id="alice")
    await provider.sandboxes[sandbox_id].upload_bytes("/mnt/user-data/workspace/a.txt", b"x")
    probe = SandboxContentProbe(provider)
    # Called from a running loop: it runs on a helper thread's own loop.
    assert probe.digest(_target(sandbox_id=sandbox_id)) == hashlib.sha256(b"x").hexdigest()
    assert await asyncio.to_thread(probe.digest, _target(sandbox_id=sandbox_id)) == (
        hashlib.sha256(b"x").hexdigest()
    )


async def test_host_probe_refuses_paths_outside_the_user_data_roots(tmp_path: Path) -> None:
    probe = HostPathContentProbe(tmp_path)
    for path in ("/etc/passwd", "/mnt/skills/x/SKILL.md", "/mnt/user-data/other/x"):
        with pytest.raises(SandboxError):
            await probe.adigest(_target(path=path))
    with pytest.raises(FileNotFoundError):
        await probe.adigest(_target())


async def test_gate_through_a_sandbox_provider_in_a_real_run() -> None:
    """The wiring the integrator applies: tools and probe share one provider."""
    provider = MemoryProvider()

    async def _sandbox(runtime: ToolRuntime[Any, Any]) -> Sandbox:
        thread_id = str(runtime.config["configurable"]["thread_id"])
        sandbox = provider.get(await provider.acquire(thread_id, user_id="default"))
        assert sandbox is not None
        return sandbox

    async def read_file(description: str, path: str, runtime: ToolRuntime[Any, Any]) -> str:
        return await (await _sandbox(runtime)).read_file(normalize_virtual_path(path))

    async def write_file(
        description: str, path: str, content: str, runtime: ToolRuntime[Any, Any]
    ) -> str:
        await (await _sandbox(runtime)).write_file(normalize_virtual_path(path), content)
        return "OK"

    sandbox = provider.get(await provider.acquire("mem-thread", user_id="default"))
    assert isinstance(sandbox, MemorySandbox)
    sandbox.files["/mnt/user-data/workspace/n.md"] = b"v1"
    agent = make_agent(
        [
            ai_tools(tool_call("write_file", description="d", path="n.md", content="v2")),
            ai_tools(tool_call("read_file", description="d", path="n.md")),
            ai_tools(tool_call("write_file", description="d", path="n.md", content="v2")),
            ai_text("done"),
        ],
        tools=[
            StructuredTool.from_function(coroutine=read_file, name="read_file", description="r"),
            StructuredTool.from_function(coroutine=write_file, name="write_file", description="w"),
        ],
        middleware=[ReadBeforeWriteMiddleware(probe=SandboxContentProbe(provider))],
    )
    state = await agent.ainvoke({"messages": [("user", "go")]}, run_config("mem-thread"))
    blocked, read, written = tool_messages(state)
    assert WRITE_BLOCK_KEY in blocked.additional_kwargs
    assert read.additional_kwargs[READ_MARK_KEY]["hash"] == hashlib.sha256(b"v1").hexdigest()
    assert written.content == "OK"
    assert sandbox.files["/mnt/user-data/workspace/n.md"] == b"v2"
