"""The local provider's namespace boundary, attacked the way the red team did (issue 13.2/13.7).

Every test here runs real commands in real namespaces on this machine; they
are skipped where the machine does not allow namespaces (the provider then
refuses commands: see ``test_without_namespaces_*``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from sandbox import local as local_module
from sandbox.base import SandboxError
from sandbox.isolation import CommandLimits, probe_namespaces
from sandbox.local import NOT_ISOLATED_WARNING, LocalSandbox, LocalSandboxProvider
from tests.support.processes import wait_gone

_REASON, _ROOT = probe_namespaces()
needs_namespaces = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))


async def _sandbox(provider: LocalSandboxProvider, user: str = "alice") -> LocalSandbox:
    sandbox = provider.get(await provider.acquire("t1", user_id=user))
    assert sandbox is not None
    return sandbox


@needs_namespaces
async def test_the_server_environment_and_processes_are_invisible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_SECRET", "jwt-secret-that-must-not-leak")
    monkeypatch.setenv("HARMLESS_SERVER_SETTING", "server-only-value")
    provider = LocalSandboxProvider(tmp_path / "data", auth_mode="jwt")
    sandbox = await _sandbox(provider)
    assert provider.isolated
    # The server's own (initial) environment, as /proc shows it to anyone allowed to read it.
    environ = await asyncio.to_thread(Path(f"/proc/{os.getpid()}/environ").read_bytes)
    server_environ = environ.split(b"\0")
    server_values = [v.split(b"=", 1)[1].decode() for v in server_environ if b"=" in v]
    server_values = [v for v in server_values if len(v) >= 12 and "/" in v]
    result = await sandbox.execute_command(
        "env; cat /proc/$PPID/environ /proc/1/environ; for p in /proc/[0-9]*; do "
        "cat $p/environ $p/cmdline; echo; done; ps eww -e; ls /proc | grep -c '^[0-9]'",
    )
    out = result.output
    assert "jwt-secret-that-must-not-leak" not in out
    assert "server-only-value" not in out and "HARMLESS_SERVER_SETTING" not in out
    for value in server_values:
        assert value not in out, value
    assert "pytest" not in out
    assert int(out.strip().splitlines()[-1]) <= 6, "only the command's own processes"
    assert str(tmp_path) not in out


@needs_namespaces
async def test_other_users_and_the_host_are_out_of_sight(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path / "data", auth_mode="jwt")
    bob = await _sandbox(provider, "bob")
    await bob.write_file("/mnt/user-data/workspace/bob-secret.txt", "bob's private words")
    alice = await _sandbox(provider, "alice")
    bob_host = bob.paths.workspace / "bob-secret.txt"
    result = await alice.execute_command(
        f"cat {bob_host}; echo ROOT: $(ls /); ls -a /mnt /mnt/user-data/..; "
        "grep -rs 'private words' / --exclude-dir=proc --exclude-dir=sys; "
        "cat /etc/shadow; ls /root /home; echo pwned > /usr/bin/pwned; "
        "ln /etc/passwd /mnt/user-data/workspace/passwd-link; echo END"
    )
    out = result.output
    assert "bob's private words" not in out
    root_line = next(line for line in out.splitlines() if line.startswith("ROOT:"))
    visible = set(root_line.split()[1:])
    assert visible <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "mnt", "proc"} | {
        "sbin",
        "tmp",
        "usr",
    }, visible
    assert "Read-only file system" in out
    assert "cross-device" in out or "Invalid" in out, out
    assert not await asyncio.to_thread((alice.paths.workspace / "passwd-link").exists)
    assert not await asyncio.to_thread(Path("/usr/bin/pwned").exists)
    assert out.rstrip().endswith("END")


@needs_namespaces
@pytest.mark.parametrize(
    "command",
    [
        "setsid sleep {m} & echo started",
        "(sleep {m} &); echo started",
        "sh -c 'sh -c \"sleep {m} &\" &'; echo started",
        "nohup sleep {m} >/dev/null 2>&1 & disown; echo started",
    ],
    ids=["setsid", "subshell", "double-fork", "nohup-disown"],
)
async def test_no_process_outlives_its_command(tmp_path: Path, command: str) -> None:
    sandbox = await _sandbox(LocalSandboxProvider(tmp_path / "data", auth_mode="jwt"))
    marker = f"{400 + os.getpid() % 1000}.{abs(hash(command)) % 997}"
    result = await sandbox.execute_command(command.format(m=marker), timeout=30)
    assert result.output.strip() == "started" and not result.timed_out
    await wait_gone(f"sleep {marker}")


def _limited(tmp_path: Path) -> LocalSandboxProvider:
    return LocalSandboxProvider(
        tmp_path / "data",
        auth_mode="jwt",
        limits=CommandLimits(
            max_processes=24,
            max_memory_bytes=512 * 1024 * 1024,
            max_cpu_seconds=1,
            max_file_bytes=1024 * 1024,
        ),
    )


@needs_namespaces
async def test_a_fork_bomb_stops_inside_the_sandbox(tmp_path: Path) -> None:
    sandbox = await _sandbox(_limited(tmp_path))
    # The shell returns on its own; the namespace (and the bomb) die with it.
    # Not always at once: the shell forks both sides of `:|:` itself, and on a
    # loaded machine the first side's children can take the last process slots
    # before the second fork; bash then retries that fork with a back-off of
    # 1+2+4+8 s before it gives up. The timeout leaves room for that.
    quick = await sandbox.execute_command(":(){ :|:& };:", timeout=60)
    assert not quick.timed_out
    # Kept alive, the bomb hits the process limit inside the sandbox.
    held = await sandbox.execute_command("bomb(){ bomb|bomb& };bomb; sleep 1", timeout=3)
    assert "Resource temporarily unavailable" in held.output
    await wait_gone("bomb")
    after = await sandbox.execute_command("echo alive")
    assert after.output.strip() == "alive"


@needs_namespaces
async def test_process_memory_cpu_and_file_size_limits(tmp_path: Path) -> None:
    sandbox = await _sandbox(_limited(tmp_path))
    many = await sandbox.execute_command("for i in $(seq 40); do sleep 2 & done 2>&1; wait")
    assert "Resource temporarily unavailable" in many.output
    hog = await sandbox.execute_command(
        "python3 -c 'x = bytearray(1024 ** 3)' 2>&1 | tail -1; echo rc=${PIPESTATUS[0]}"
    )
    assert "MemoryError" in hog.output
    spin = await sandbox.execute_command("while :; do :; done", timeout=30)
    # SIGXCPU at the soft limit (ignored by a shell that is process 1), SIGKILL at the hard one
    assert not spin.timed_out and spin.exit_code in (128 + 24, 128 + 9), spin
    big = await sandbox.execute_command("head -c 2000000 /dev/zero > big.bin; echo rc=$?")
    assert "rc=153" in big.output or "File too large" in big.output, big.output


async def test_without_namespaces_commands_are_off_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(
        local_module, "probe_namespaces", lambda **_: ("user namespaces are disabled", None)
    )
    jwt = LocalSandboxProvider(tmp_path / "a", auth_mode="jwt")
    assert jwt.allows_commands and jwt.isolated is None, "nothing checked before start"
    with caplog.at_level(logging.ERROR, logger="sandbox.local"):
        await jwt.start()  # the server's lifespan: the log says it at start-up
    assert "shell commands are off" in caplog.text
    assert not jwt.allows_commands and jwt.isolated is False
    sandbox = await _sandbox(jwt)
    with pytest.raises(SandboxError, match="cannot be isolated"):
        await sandbox.execute_command("id")
    await sandbox.write_file("/mnt/user-data/workspace/f.txt", "file tools still work")

    required = LocalSandboxProvider(tmp_path / "b", auth_mode="none", isolation="required")
    with pytest.raises(SandboxError, match="required"):
        await (await _sandbox(required)).execute_command("id")

    for provider in (
        LocalSandboxProvider(tmp_path / "c", auth_mode="none"),
        LocalSandboxProvider(tmp_path / "d", auth_mode="api_key", allow_unisolated_bash=True),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sandbox.local"):
            sandbox = await _sandbox(provider)
        assert NOT_ISOLATED_WARNING in caplog.text
        result = await sandbox.execute_command("echo on-the-host; pwd")
        assert result.output.split()[0] == "on-the-host"


async def test_limits_apply_without_namespaces_too(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(
        tmp_path / "data",
        isolation="off",
        auth_mode="none",
        limits=CommandLimits(max_memory_bytes=512 * 1024 * 1024, max_file_bytes=1024 * 1024),
    )
    sandbox = await _sandbox(provider)
    result = await sandbox.execute_command("ulimit -v; ulimit -f")
    assert result.output.split() == [str(512 * 1024), str(1024 * 1024 // 1024)]


def test_probe_runs_once_per_provider(tmp_path: Path) -> None:
    calls: list[int] = []

    async def main() -> None:
        provider = LocalSandboxProvider(tmp_path / "data", auth_mode="none")
        original = local_module.probe_namespaces

        def counting(**kwargs: bool) -> tuple[str | None, Path | None]:
            calls.append(1)
            return original(**kwargs)

        local_module.probe_namespaces = counting  # type: ignore[assignment]
        try:
            await asyncio.gather(*(provider.acquire(f"t{i}", user_id="u") for i in range(5)))
        finally:
            local_module.probe_namespaces = original  # type: ignore[assignment]

    asyncio.run(main())
    assert calls == [1]


def test_commands_run_under_uvloop(tmp_path: Path) -> None:
    """``langgraph dev`` serves on uvloop, whose pipe transports differ from asyncio's."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> str:
        provider = LocalSandboxProvider(tmp_path / "data", auth_mode="none")
        sandbox = await _sandbox(provider)
        result = await asyncio.wait_for(sandbox.execute_command("echo under-uvloop"), 30)
        return result.output

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(main()).strip() == "under-uvloop"
