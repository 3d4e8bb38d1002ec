"""What only the local provider does: host translation, the off switch, process hygiene."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from runtime.config import PROJECT_ROOT, load_settings
from sandbox.base import SandboxError
from sandbox.local import NOT_ISOLATED_WARNING, LocalSandbox, LocalSandboxProvider
from sandbox.provider import get_sandbox_provider, reset_sandbox_providers
from tests.support.scripted import ai_text, write_config
from tests.support.waiting import eventually


async def _sandbox(provider: LocalSandboxProvider, thread: str = "t1") -> LocalSandbox:
    sandbox = provider.get(await provider.acquire(thread, user_id="alice"))
    assert sandbox is not None
    return sandbox


async def test_host_paths_never_reach_the_model(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path / "data")
    sandbox = await _sandbox(provider)
    result = await sandbox.execute_command(
        "pwd; readlink -f .; echo $PWD; ls -d /mnt/user-data/uploads"
    )
    assert str(tmp_path) not in result.output
    lines = result.output.split()
    assert lines[:3] == ["/mnt/user-data/workspace"] * 3
    assert lines[3] == "/mnt/user-data/uploads"


async def test_commands_can_be_switched_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sandbox.local"):
        LocalSandboxProvider(tmp_path / "on")
    assert NOT_ISOLATED_WARNING in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sandbox.local"):
        provider = LocalSandboxProvider(tmp_path / "off", allow_host_bash=False)
    assert NOT_ISOLATED_WARNING not in caplog.text
    assert not provider.allows_commands
    sandbox = await _sandbox(provider)
    with pytest.raises(SandboxError, match="allow_host_bash"):
        await sandbox.execute_command("id")
    await sandbox.write_file("still.txt", "files still work")
    assert await sandbox.read_file("still.txt") == "files still work"


async def test_bad_commands_and_timeouts(tmp_path: Path) -> None:
    sandbox = await _sandbox(LocalSandboxProvider(tmp_path / "data"))
    for command in ("", "   ", "echo \x00"):
        with pytest.raises(SandboxError):
            await sandbox.execute_command(command)
    with pytest.raises(SandboxError, match="positive"):
        await sandbox.execute_command("true", timeout=0)
    result = await sandbox.execute_command("read line; echo got:$line")
    assert result.output.strip() == "got:", "stdin is empty, never the server's"


async def test_configured_secret_patterns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERNAL_ENDPOINT", "http://10.0.0.1")
    provider = LocalSandboxProvider(tmp_path / "data", secret_env_patterns=["INTERNAL_*"])
    result = await (await _sandbox(provider)).execute_command("env")
    assert "INTERNAL_ENDPOINT" not in result.output and "10.0.0.1" not in result.output


async def test_cancellation_kills_the_process_group(tmp_path: Path) -> None:
    sandbox = await _sandbox(LocalSandboxProvider(tmp_path / "data"))
    pid_file = sandbox.paths.workspace / "child.pid"
    task = asyncio.create_task(sandbox.execute_command(f"sleep 300 & echo $! > {pid_file}; wait"))
    await eventually(lambda: pid_file.exists() and pid_file.read_text().strip())
    child = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: _gone(child), message=f"child {child} survived the cancelled command")


def _gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its (new) parent to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] in {"Z", "X"}
    except OSError:
        return True


async def test_a_background_child_holding_the_pipe_does_not_hang_the_call(tmp_path: Path) -> None:
    sandbox = await _sandbox(LocalSandboxProvider(tmp_path / "data"))
    result = await sandbox.execute_command("sleep 30 & echo $!; echo finished", timeout=60)
    assert not result.timed_out and result.exit_code == 0
    pid, marker = result.output.split()
    assert marker == "finished"
    os.kill(int(pid), 9)


def test_from_settings_and_the_shared_provider(tmp_path: Path) -> None:
    reset_sandbox_providers()
    settings = load_settings(
        write_config(
            tmp_path,
            [ai_text("x")],
            sandbox={
                "allow_host_bash": False,
                "command_timeout_seconds": 7,
                "max_output_bytes": 4096,
                "skills_dir": "my-skills",
                "secret_env_patterns": ["CORP_*"],
            },
        )
    )
    provider = get_sandbox_provider(settings)
    assert isinstance(provider, LocalSandboxProvider)
    assert provider is get_sandbox_provider(settings)
    assert provider.data_root == settings.data_root_path()
    assert provider.skills_dir == PROJECT_ROOT / "my-skills"
    assert (provider.command_timeout, provider.max_output_bytes) == (7, 4096)
    assert provider.secret_env_patterns == ("CORP_*",)
    assert not provider.allows_commands
