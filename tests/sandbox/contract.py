"""The sandbox provider contract, as a reusable test suite.

Every provider must pass it. To run it against a provider, subclass
``SandboxContract`` in a ``test_*.py`` module and define one fixture,
``sandbox_provider``, that yields a ready provider (and cleans up after)::

    class TestMyProvider(SandboxContract):
        @pytest.fixture
        async def sandbox_provider(self, tmp_path):
            provider = MyProvider(...)
            yield provider
            await provider.reset()

The suite only uses the public contract (``sandbox.base``): virtual paths,
commands through the provider's shell, and ``/tmp`` inside the sandbox as the
"outside" that escapes must not reach. It needs a POSIX shell with
``coreutils`` in the sandbox, as every real sandbox image has.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sandbox.base import (
    Sandbox,
    SandboxError,
    SandboxNotFoundError,
    SandboxPathError,
    SandboxProvider,
)

__all__ = ["SandboxContract", "peak_rss_growth"]

WS = "/mnt/user-data/workspace"
OUT = "/mnt/user-data/outputs"
UPL = "/mnt/user-data/uploads"

FIFTY_MB = 50 * 1024 * 1024


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


class _PeakRss:
    growth_bytes: int = 0


@contextlib.contextmanager
def peak_rss_growth() -> Iterator[_PeakRss]:
    """Measure how far this process's peak RSS rose above its RSS at the start.

    Resets the kernel's high-water mark (``/proc/self/clear_refs``) so the
    peak is this block's, not the process's lifetime peak.
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError as exc:  # pragma: no cover - only on exotic kernels
        pytest.skip(f"cannot reset the RSS high-water mark: {exc}")
    result = _PeakRss()
    baseline = _rss_kib("VmRSS")
    yield result
    result.growth_bytes = max(0, _rss_kib("VmHWM") - baseline) * 1024


def pid_gone_script(pid_file: str, *, seconds: int) -> str:
    """Shell that prints ``gone`` once the pid in ``pid_file`` has exited (a zombie counts),
    polling for up to ``seconds``, else ``alive``: polled, never a fixed sleep."""
    return (
        f"pid=$(cat {pid_file}); for i in $(seq {seconds * 10}); do "
        "st=$(awk '/^State:/{print $2}' /proc/$pid/status 2>/dev/null); "
        'if [ -z "$st" ] || [ "$st" = Z ]; then echo gone; exit 0; fi; sleep 0.1; done; '
        "echo alive"
    )


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class SandboxContract:
    """Provider-agnostic behaviour every ``SandboxProvider`` must show."""

    # Subclasses may tighten these.
    max_capped_output_bytes = 8 * 1024 * 1024
    max_rss_growth_bytes = 25 * 1024 * 1024

    @pytest.fixture
    async def sandbox_provider(self) -> AsyncIterator[SandboxProvider]:  # pragma: no cover
        raise NotImplementedError("define a sandbox_provider fixture in the subclass")
        yield

    @pytest.fixture
    async def sandbox(self, sandbox_provider: SandboxProvider) -> Sandbox:
        sandbox_id = await sandbox_provider.acquire(_unique("thread"), user_id="contract-user")
        found = sandbox_provider.get(sandbox_id)
        assert found is not None
        return found

    async def _outside_file(self, sandbox: Sandbox, content: str = "original") -> str:
        """A file in the sandbox's /tmp: outside every virtual root."""
        path = f"/tmp/{_unique('contract-outside')}"
        result = await sandbox.execute_command(f"printf '%s' '{content}' > {path}")
        assert result.exit_code == 0, result.output
        return path

    # --- lifecycle ---------------------------------------------------------------

    async def test_acquire_is_per_user_and_thread_and_idempotent(
        self, sandbox_provider: SandboxProvider
    ) -> None:
        thread = _unique("thread")
        first = await sandbox_provider.acquire(thread, user_id="alice")
        assert await sandbox_provider.acquire(thread, user_id="alice") == first
        assert await sandbox_provider.acquire(thread, user_id="bob") != first
        assert await sandbox_provider.acquire(_unique("thread"), user_id="alice") != first
        sandbox = sandbox_provider.get(first)
        assert sandbox is not None and sandbox.id == first
        assert sandbox.belongs_to("alice", thread)
        assert not sandbox.belongs_to("bob", thread)
        assert sandbox_provider.get("no-such-sandbox") is None

    async def test_release_and_reset(self, sandbox_provider: SandboxProvider) -> None:
        thread = _unique("thread")
        sandbox_id = await sandbox_provider.acquire(thread, user_id="alice")
        await sandbox_provider.release(sandbox_id)
        await sandbox_provider.reset()
        assert sandbox_provider.get(sandbox_id) is None
        again = await sandbox_provider.acquire(thread, user_id="alice")
        assert sandbox_provider.get(again) is not None

    async def test_unsafe_ids_are_refused(self, sandbox_provider: SandboxProvider) -> None:
        for user, thread in (("../alice", "t"), ("alice", "../t"), ("a/b", "t"), ("", "t")):
            with pytest.raises(SandboxError):
                await sandbox_provider.acquire(thread, user_id=user)

    # --- commands ----------------------------------------------------------------

    async def test_command_output_and_exit_code(self, sandbox: Sandbox) -> None:
        result = await sandbox.execute_command("echo to-out; echo to-err 1>&2; exit 3")
        assert result.exit_code == 3
        assert "to-out" in result.output and "to-err" in result.output
        assert not result.timed_out and not result.truncated

    async def test_commands_run_in_the_workspace_with_virtual_paths(self, sandbox: Sandbox) -> None:
        result = await sandbox.execute_command("pwd")
        assert result.output.strip() == WS
        await sandbox.write_file(f"{WS}/note.txt", "from a tool\n")
        result = await sandbox.execute_command(
            f"cat {WS}/note.txt && echo made > {OUT}/made.txt && ls {UPL} >/dev/null"
        )
        assert result.exit_code == 0, result.output
        assert "from a tool" in result.output
        assert await sandbox.read_file(f"{OUT}/made.txt") == "made\n"

    async def test_secret_looking_environment_is_withheld(
        self, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        planted = {
            "CONTRACT_API_KEY": "value-key-1",
            "CONTRACT_CLIENT_SECRET": "value-secret-2",
            "contract_session_token": "value-token-3",
            "CONTRACT_DB_PASSWORD": "value-pass-4",
        }
        for name, value in planted.items():
            monkeypatch.setenv(name, value)
        result = await sandbox.execute_command(
            "env",
            env={"EXPLICIT_ACCESS_TOKEN": "value-token-5", "CONTRACT_PLAIN_SETTING": "visible"},
        )
        assert result.exit_code == 0
        for text in [*planted, *planted.values(), "EXPLICIT_ACCESS_TOKEN", "value-token-5"]:
            assert text not in result.output, text
        assert "CONTRACT_PLAIN_SETTING=visible" in result.output

    async def test_timeout_kills_the_whole_process_tree(self, sandbox: Sandbox) -> None:
        pid_file = f"{WS}/{_unique('bg')}.pid"
        result = await sandbox.execute_command(
            f"sleep 300 & echo $! > {pid_file}; sleep 300", timeout=1
        )
        assert result.timed_out
        assert result.exit_code != 0
        check = await sandbox.execute_command(pid_gone_script(pid_file, seconds=10))
        assert check.output.strip() == "gone", check.output

    async def test_no_process_outlives_its_command(self, sandbox: Sandbox) -> None:
        """Background, setsid and double-forked children are gone when the command ends (13.7)."""
        marker = f"{700 + os.getpid() % 100}.{os.getpid() % 89}"
        result = await sandbox.execute_command(
            f"setsid sleep {marker} & (sleep {marker} &); sh -c 'sleep {marker} &' & echo started"
        )
        assert result.output.strip() == "started"
        check = await sandbox.execute_command(
            f"for p in /proc/[0-9]*; do {{ tr '\\0' ' ' < $p/cmdline; }} 2>/dev/null; echo; done "
            f"| grep -c 'slee[p] {marker}' || true"
        )
        assert check.output.strip() == "0", check.output

    async def test_fifty_megabytes_of_output_are_capped_while_streaming(
        self, sandbox: Sandbox
    ) -> None:
        with peak_rss_growth() as rss:
            result = await sandbox.execute_command(
                f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {FIFTY_MB}; echo; echo END-MARK"
            )
        assert result.exit_code == 0
        assert result.truncated
        assert len(result.output.encode()) < self.max_capped_output_bytes
        assert result.output.startswith("0123456789abcdef")
        assert result.output.rstrip().endswith("END-MARK"), "the tail is kept"
        assert rss.growth_bytes < self.max_rss_growth_bytes, (
            f"peak RSS grew {rss.growth_bytes} bytes for a {FIFTY_MB}-byte output"
        )

    # --- files -------------------------------------------------------------------

    async def test_text_round_trip_and_unicode(self, sandbox: Sandbox) -> None:
        text = "héllo wörld → ✓\nline two\n"
        await sandbox.write_file(f"{WS}/u.txt", text)
        assert await sandbox.read_file(f"{WS}/u.txt") == text
        assert await sandbox.download_bytes(f"{WS}/u.txt") == text.encode("utf-8")
        await sandbox.write_file("u.txt", "line three\n", append=True)
        assert await sandbox.read_file("u.txt") == text + "line three\n"

    async def test_line_ranges(self, sandbox: Sandbox) -> None:
        await sandbox.write_file(f"{WS}/lines.txt", "".join(f"line{i}\n" for i in range(1, 11)))
        assert await sandbox.read_file(f"{WS}/lines.txt", 2, 3) == "line2\nline3\n"
        assert await sandbox.read_file(f"{WS}/lines.txt", 9) == "line9\nline10\n"
        assert await sandbox.read_file(f"{WS}/lines.txt", None, 1) == "line1\n"
        assert await sandbox.read_file(f"{WS}/lines.txt", 20, 30) == ""
        with pytest.raises(SandboxError):
            await sandbox.read_file(f"{WS}/lines.txt", 0, 2)
        with pytest.raises(SandboxError):
            await sandbox.read_file(f"{WS}/lines.txt", 5, 2)

    async def test_binary_files_round_trip_and_are_not_read_as_text(self, sandbox: Sandbox) -> None:
        data = bytes(range(256)) * 64 + b"\x00\xff\xfe"
        await sandbox.upload_bytes(f"{UPL}/blob.bin", data)
        assert await sandbox.download_bytes(f"{UPL}/blob.bin") == data
        size = await sandbox.execute_command(f"wc -c < {UPL}/blob.bin")
        assert size.output.strip() == str(len(data))
        with pytest.raises(SandboxError, match="binary"):
            await sandbox.read_file(f"{UPL}/blob.bin")

    async def test_non_utf8_text_is_decoded_with_replacement(self, sandbox: Sandbox) -> None:
        raw = b"caf\xe9 au lait\nsecond line \xff\n"
        await sandbox.upload_bytes(f"{WS}/latin1.txt", raw)
        text = await sandbox.read_file(f"{WS}/latin1.txt")
        assert "\ufffd" in text and "second line" in text
        assert await sandbox.download_bytes(f"{WS}/latin1.txt") == raw
        shown = await sandbox.execute_command(f"cat {WS}/latin1.txt")
        assert "au lait" in shown.output and "\ufffd" in shown.output

    async def test_missing_files_and_directories_are_sandbox_errors(self, sandbox: Sandbox) -> None:
        with pytest.raises(SandboxNotFoundError):
            await sandbox.read_file(f"{WS}/missing.txt")
        with pytest.raises(FileNotFoundError):
            await sandbox.download_bytes(f"{WS}/missing.bin")
        with pytest.raises(SandboxNotFoundError):
            await sandbox.download_bytes(f"{WS}/missing-dir/missing.bin")
        with pytest.raises(SandboxNotFoundError):
            await sandbox.list_dir(f"{WS}/missing-dir")
        with pytest.raises(SandboxError) as caught:
            await sandbox.read_file(WS)
        assert not isinstance(caught.value, FileNotFoundError), "a directory exists"

    async def test_list_glob_grep(self, sandbox: Sandbox) -> None:
        await sandbox.write_file(f"{WS}/pkg/mod.py", "def needle():\n    return 1\n")
        await sandbox.write_file(f"{WS}/pkg/deep/inner.py", "NEEDLE = 2\n")
        await sandbox.write_file(f"{WS}/notes.md", "a needle in notes\nno match\n")
        await sandbox.upload_bytes(f"{WS}/pkg/data.bin", b"needle\x00binary")
        listing = await sandbox.list_dir(WS, max_depth=2)
        assert f"{WS}/pkg/" in listing and f"{WS}/notes.md" in listing
        assert f"{WS}/pkg/mod.py" in listing
        assert f"{WS}/pkg/deep/inner.py" not in listing, "max_depth=2 stops there"
        found = await sandbox.glob("**/*.py", WS)
        assert set(found) == {f"{WS}/pkg/mod.py", f"{WS}/pkg/deep/inner.py"}
        assert await sandbox.glob("*.md", WS) == [f"{WS}/notes.md"]
        matches = await sandbox.grep("needle", WS)
        hits = {(m.path, m.line_number) for m in matches}
        assert (f"{WS}/pkg/mod.py", 1) in hits and (f"{WS}/notes.md", 1) in hits
        assert (f"{WS}/pkg/deep/inner.py", 1) in hits, "case-insensitive by default"
        assert all(m.path != f"{WS}/pkg/data.bin" for m in matches), "binary files skipped"
        sensitive = await sandbox.grep("needle", WS, case_sensitive=True, glob="*.py")
        assert {m.path for m in sensitive} == {f"{WS}/pkg/mod.py"}
        assert await sandbox.grep("needle()", WS, literal=True) != []
        assert len(await sandbox.grep("e", WS, max_results=2)) == 2
        with pytest.raises(SandboxError):
            await sandbox.grep("([unclosed", WS)

    async def test_is_file(self, sandbox: Sandbox) -> None:
        await sandbox.write_file(f"{OUT}/report.md", "# r\n")
        assert await sandbox.is_file(f"{OUT}/report.md")
        assert not await sandbox.is_file(OUT)
        assert not await sandbox.is_file(f"{OUT}/missing.md")
        assert not await sandbox.is_file("/etc/passwd")

    async def test_skills_are_read_only(self, sandbox: Sandbox) -> None:
        with pytest.raises(SandboxPathError):
            await sandbox.write_file("/mnt/skills/planted.md", "x")
        with pytest.raises(SandboxPathError):
            await sandbox.upload_bytes("/mnt/skills/planted.bin", b"x")

    # --- escapes -----------------------------------------------------------------

    @pytest.mark.parametrize(
        "path",
        [
            "../escape.txt",
            "a/../../escape.txt",
            f"{WS}/../../../../tmp/escape.txt",
            f"{WS}/..",
            "/etc/passwd",
            "/tmp/escape.txt",
            "/",
            "/mnt",
            "/mnt/user-data/elsewhere/x.txt",
            "/mnt/user-dataX/x.txt",
            "~/escape.txt",
            "with\x00nul.txt",
            "",
        ],
    )
    async def test_traversal_and_foreign_paths_are_refused(
        self, sandbox: Sandbox, path: str
    ) -> None:
        with pytest.raises(SandboxPathError):
            await sandbox.read_file(path)
        with pytest.raises(SandboxPathError):
            await sandbox.write_file(path, "escaped")
        with pytest.raises(SandboxPathError):
            await sandbox.download_bytes(path)
        with pytest.raises(SandboxPathError):
            await sandbox.upload_bytes(path, b"escaped")
        with pytest.raises(SandboxPathError):
            await sandbox.list_dir(path)
        with pytest.raises(SandboxPathError):
            await sandbox.grep("root", path)
        with pytest.raises(SandboxPathError):
            await sandbox.glob("*", path)

    async def test_a_refused_write_writes_nothing(self, sandbox: Sandbox) -> None:
        target = f"/tmp/{_unique('contract-escape')}.txt"
        for path in (target, f"{WS}/../../../../../../..{target}"):
            with pytest.raises(SandboxPathError):
                await sandbox.write_file(path, "escaped")
        check = await sandbox.execute_command(f"test -e {target} && echo present || echo absent")
        assert check.output.strip() == "absent"

    async def test_glob_patterns_cannot_climb_out(self, sandbox: Sandbox) -> None:
        for pattern in ("../*", "/etc/*", "a/../../*"):
            with pytest.raises(SandboxPathError):
                await sandbox.glob(pattern, WS)
            with pytest.raises(SandboxPathError):
                await sandbox.grep("x", WS, glob=pattern)

    async def test_hard_linked_files_are_refused(self, sandbox: Sandbox) -> None:
        """A second name for a file may be a host file's: every file tool refuses it (13.12)."""
        made = await sandbox.execute_command(
            f"echo 'linked-secret-line' > {WS}/orig.txt && ln {WS}/orig.txt {WS}/hard.txt"
        )
        assert made.exit_code == 0, made.output
        for path in (f"{WS}/orig.txt", f"{WS}/hard.txt"):
            with pytest.raises(SandboxError, match="hard link"):
                await sandbox.read_file(path)
            with pytest.raises(SandboxError, match="hard link"):
                await sandbox.download_bytes(path)
            with pytest.raises(SandboxError, match="hard link"):
                await sandbox.write_file(path, "appended", append=True)
            with pytest.raises(SandboxError, match="hard link"):
                await sandbox.write_file(path, "replaced")
        assert await sandbox.grep("linked-secret-line", WS) == []
        intact = await sandbox.execute_command(f"cat {WS}/orig.txt")
        assert intact.output == "linked-secret-line\n"

    async def test_a_catastrophic_regex_stops_at_its_limit(self, sandbox: Sandbox) -> None:
        await sandbox.write_file(f"{WS}/redos.txt", "a" * 34 + "!\n")
        with pytest.raises(SandboxError, match="limit"):
            await sandbox.grep("(a+)+$", WS, max_results=1)
        assert await sandbox.grep("a+!", WS) != []

    async def test_symlinks_pointing_out_are_never_followed(self, sandbox: Sandbox) -> None:
        outside = await self._outside_file(sandbox)
        outside_dir = f"/tmp/{_unique('contract-outside-dir')}"
        made = await sandbox.execute_command(
            f"mkdir -p {outside_dir} && echo 'root-secret-line' > {outside_dir}/secret.txt && "
            f"ln -s {outside} {WS}/file-link && ln -s {outside_dir} {WS}/dir-link && "
            f"ln -s {outside_dir} {OUT}/out-link"
        )
        assert made.exit_code == 0, made.output
        for path in (f"{WS}/file-link", f"{WS}/dir-link/secret.txt", f"{OUT}/out-link/secret.txt"):
            with pytest.raises(SandboxPathError):
                await sandbox.read_file(path)
            with pytest.raises(SandboxPathError):
                await sandbox.download_bytes(path)
        for path in (f"{WS}/file-link", f"{WS}/dir-link/new.txt", f"{WS}/dir-link/sub/new.txt"):
            with pytest.raises(SandboxPathError):
                await sandbox.write_file(path, "pwned")
            with pytest.raises(SandboxPathError):
                await sandbox.upload_bytes(path, b"pwned")
        with pytest.raises(SandboxPathError):
            await sandbox.write_file(f"{WS}/file-link", "pwned", append=True)
        with pytest.raises(SandboxPathError):
            await sandbox.list_dir(f"{WS}/dir-link")
        assert not await sandbox.is_file(f"{WS}/file-link")
        listing = await sandbox.list_dir(WS, max_depth=3)
        assert f"{WS}/dir-link@" in listing and f"{WS}/file-link@" in listing
        assert not any("secret.txt" in entry for entry in listing)
        assert not any("secret" in p for p in await sandbox.glob("**/*", WS))
        assert await sandbox.grep("root-secret-line", WS) == []
        intact = await sandbox.execute_command(f"cat {outside}; echo; ls {outside_dir}")
        assert intact.output.split() == ["original", "secret.txt"], intact.output

    async def test_a_directory_swapped_for_a_link_is_refused(self, sandbox: Sandbox) -> None:
        outside_dir = f"/tmp/{_unique('contract-swap')}"
        await sandbox.write_file(f"{WS}/reports/keep.txt", "kept")
        assert await sandbox.read_file(f"{WS}/reports/keep.txt") == "kept"
        swapped = await sandbox.execute_command(
            f"mkdir -p {outside_dir} && echo outside > {outside_dir}/keep.txt && "
            f"mv {WS}/reports {WS}/old-reports && ln -s {outside_dir} {WS}/reports"
        )
        assert swapped.exit_code == 0, swapped.output
        with pytest.raises(SandboxPathError):
            await sandbox.write_file(f"{WS}/reports/planted.txt", "pwned")
        with pytest.raises(SandboxPathError):
            await sandbox.read_file(f"{WS}/reports/keep.txt")
        check = await sandbox.execute_command(f"ls -A {outside_dir}")
        assert check.output.split() == ["keep.txt"]
