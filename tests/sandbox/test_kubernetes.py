"""The Kubernetes sandbox provider against a fake cluster (real client, HTTP and websocket)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from blockbuster import blockbuster_ctx

from runtime.paths import thread_paths
from sandbox._k8s_pods import (
    ANN_LAST_ACTIVITY,
    ANN_SPEC_HASH,
    ANN_THREAD_ID,
    ANN_USER_ID,
    LABEL_SANDBOX,
    LABEL_STATE,
    format_time,
    pod_manifest,
    sandbox_key,
    sandbox_name,
)
from sandbox.base import SandboxError, SandboxPathError
from sandbox.kubernetes import KubernetesSandbox, KubernetesSandboxProvider
from tests.sandbox.contract import pid_gone_script
from tests.support.fake_kubernetes import (
    V4,
    V5,
    FakeKubernetes,
    kubernetes_provider,
    namespaces_supported,
)
from tests.support.waiting import eventually

NS = "deerflow-sandbox"
WS = "/mnt/user-data/workspace"

_reason = namespaces_supported()
if _reason is not None:  # a machine that cannot fake exec must say so loudly under CI
    if os.environ.get("CI"):
        raise RuntimeError(_reason)
    pytestmark = pytest.mark.skip(reason=_reason)


class Clock:
    """A wall clock the tests move by hand (idle times, reaping)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


Env = tuple[KubernetesSandboxProvider, FakeKubernetes]


@pytest.fixture
def k8s(tmp_path: Path) -> Callable[..., Any]:
    """Factory: ``async with k8s(**config) as (provider, fake)``."""
    counter = iter(range(100))

    def make(**config: Any) -> Any:
        return kubernetes_provider(tmp_path / f"k{next(counter)}", **config)

    return make


@pytest.fixture
async def env(k8s: Callable[..., Any]) -> AsyncIterator[Env]:
    async with k8s() as pair:
        yield pair


async def _sandbox(
    provider: KubernetesSandboxProvider, thread: str = "t1", user: str = "alice"
) -> KubernetesSandbox:
    sandbox_id = await provider.acquire(thread, user_id=user)
    sandbox = provider.get(sandbox_id)
    assert isinstance(sandbox, KubernetesSandbox)
    return sandbox


# --- commands ------------------------------------------------------------------------


async def test_command_runs_in_workspace_with_output_and_exit_code(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    result = await sandbox.execute_command("pwd; echo to-out; echo to-err >&2; exit 7")
    assert result.exit_code == 7
    assert not result.timed_out and not result.truncated
    assert result.output.splitlines() == [WS, "to-out", "to-err"]


async def test_environment_is_explicit_and_secret_names_are_dropped(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    result = await sandbox.execute_command(
        "env | sort",
        env={"GREETING": "hello", "OPENAI_API_KEY": "sk-1", "db_password": "x", "MY_TOKEN": "t"},
    )
    names = {line.split("=", 1)[0] for line in result.output.splitlines()}
    assert "GREETING=hello" in result.output.splitlines()
    assert {"OPENAI_API_KEY", "db_password", "MY_TOKEN"}.isdisjoint(names)
    # Only what the provider passes: not the container's own environment.
    assert "HOSTNAME" not in names
    assert {"PATH", "HOME", "LANG"} <= names
    malformed = await sandbox.execute_command("env", env={"A=B": "x", "SECRET_SAUCE": "y"})
    assert "SECRET_SAUCE" not in malformed.output and "A=B=" not in malformed.output


async def test_timeout_is_enforced_inside_the_pod(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    # The timeout leaves the shell ample time to print and record its child
    # before it fires, so a loaded machine cannot make `started` go missing.
    result = await sandbox.execute_command(
        f"sleep 300 & echo $! > {WS}/bg.pid; echo started; sleep 300", timeout=3
    )
    assert result.timed_out
    assert result.exit_code == 137
    assert "started" in result.output
    # The whole process group was killed: the background child is gone too
    # (polled, not slept: a dying process can linger as a zombie for a moment).
    check = await sandbox.execute_command(pid_gone_script(f"{WS}/bg.pid", seconds=60))
    assert check.output.strip() == "gone", check.output


async def test_commands_get_the_configured_rlimits_in_the_pod(k8s: Callable[..., Any]) -> None:
    limits = {"limits": {"max_memory_mb": 512, "max_file_mb": 1, "max_cpu_seconds": 1}}
    async with k8s(limits=limits) as (provider, _fake):
        sandbox = await _sandbox(provider)
        result = await sandbox.execute_command("ulimit -v; ulimit -f; ulimit -t")
        assert result.output.split() == [str(512 * 1024), "1024", "1"]
        spin = await sandbox.execute_command("while :; do :; done", timeout=30)
        assert not spin.timed_out and spin.exit_code in (128 + 24, 128 + 9)


async def test_huge_output_keeps_head_and_tail_and_stays_in_the_pod(
    k8s: Callable[..., Any],
) -> None:
    async with k8s(limits={"max_output_bytes": 64 * 1024}) as (provider, fake):
        sandbox = await _sandbox(provider)
        before = fake.exec_bytes_sent
        result = await sandbox.execute_command(
            "echo FIRST; head -c 50000000 /dev/zero | tr '\\0' 'a'; echo; echo LAST"
        )
        assert result.truncated and result.exit_code == 0 and not result.timed_out
        assert result.output.startswith("FIRST\naaaa")
        assert result.output.endswith("aaaa\nLAST\n")
        assert "bytes omitted; redirect large output to a file" in result.output
        assert len(result.output) < 64 * 1024 + 200
        # The 50 MB never crossed the wire: the helper dropped the middle in the pod.
        assert fake.exec_bytes_sent - before < 256 * 1024


async def test_model_controlled_text_is_data_not_shell(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    tricky = f"{WS}/a b'$(touch pwned)\";`touch pwned2`;$HOME.txt"
    await sandbox.write_file(tricky, "x")
    assert await sandbox.list_dir(WS) == [tricky]
    assert await sandbox.read_file(tricky) == "x"
    result = await sandbox.execute_command("printf '%s|' \"it's\" '$HOME' \"a\nb\"")
    assert result.output == "it's|$HOME|a\nb|"


# --- files ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocols", [(V5, V4), (V4,)], ids=["v5", "v4-only"])
async def test_text_and_binary_files_round_trip(
    k8s: Callable[..., Any], protocols: tuple[str, ...]
) -> None:
    async with k8s(cluster={"exec_protocols": protocols}) as (provider, fake):
        sandbox = await _sandbox(provider)
        text = "héllo wörld ✓\nline two\nline three\n"
        await sandbox.write_file(f"{WS}/notes/a.txt", text)
        assert fake.exec_log[-1]["protocol"] == protocols[0]
        assert await sandbox.read_file(f"{WS}/notes/a.txt") == text
        assert await sandbox.read_file(f"{WS}/notes/a.txt", 2, 3) == "line two\nline three\n"
        assert await sandbox.read_file(f"{WS}/notes/a.txt", start_line=3) == "line three\n"
        await sandbox.write_file(f"{WS}/notes/a.txt", "line four\n", append=True)
        assert (await sandbox.read_file(f"{WS}/notes/a.txt")).endswith("three\nline four\n")

        blob = bytes(range(256)) * 512 + os.urandom(300_000)
        await sandbox.upload_bytes("/mnt/user-data/uploads/data.bin", blob)
        assert await sandbox.download_bytes("/mnt/user-data/uploads/data.bin") == blob
        await sandbox.upload_bytes("/mnt/user-data/outputs/empty.bin", b"")
        assert await sandbox.download_bytes("/mnt/user-data/outputs/empty.bin") == b""

        await sandbox.upload_bytes(f"{WS}/latin1.txt", "café\n".encode("latin-1"))
        assert await sandbox.read_file(f"{WS}/latin1.txt") == "caf\ufffd\n"
        size = await sandbox.execute_command(f"wc -c < {WS}/latin1.txt")
        assert size.output.strip() == "5"


async def test_large_reads_need_a_line_range_and_transfers_are_bounded(
    k8s: Callable[..., Any],
) -> None:
    async with k8s(max_file_bytes=8192, limits={"max_read_bytes": 4096}) as (provider, _fake):
        sandbox = await _sandbox(provider)
        await sandbox.execute_command(f"seq 1 5000 > {WS}/big.txt")
        with pytest.raises(SandboxError, match="read a line range"):
            await sandbox.read_file(f"{WS}/big.txt")
        assert await sandbox.read_file(f"{WS}/big.txt", 4999, 5000) == "4999\n5000\n"
        with pytest.raises(SandboxError, match="exceed the 4096-byte limit"):
            await sandbox.read_file(f"{WS}/big.txt", 1, 3000)
        with pytest.raises(SandboxError, match="more than the 8192-byte limit"):
            await sandbox.download_bytes(f"{WS}/big.txt")
        with pytest.raises(SandboxError, match="more than the 8192-byte limit"):
            await sandbox.upload_bytes(f"{WS}/x.bin", b"x" * 9000)
        await sandbox.upload_bytes(f"{WS}/bin.dat", b"\x00\x01binary")
        with pytest.raises(SandboxError, match="is a binary file"):
            await sandbox.read_file(f"{WS}/bin.dat")


async def test_missing_files_and_directories_are_clear_errors(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    with pytest.raises(SandboxError, match="no such file"):
        await sandbox.read_file(f"{WS}/nope.txt")
    with pytest.raises(SandboxError, match="is a directory"):
        await sandbox.read_file(WS)
    with pytest.raises(SandboxError, match="no such file or directory"):
        await sandbox.list_dir(f"{WS}/missing")
    with pytest.raises(SandboxError, match="end_line"):
        await sandbox.read_file(f"{WS}/x", 5, 2)
    with pytest.raises(SandboxError, match="command is empty"):
        await sandbox.execute_command("  ")


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/mnt/user-data/workspace/../../../etc/passwd",
        "../secrets",
        "/mnt/user-data-other/x",
        "/mnt/skillsx/a",
        "/mnt/user-data/workspace/a\x00b",
        "",
    ],
)
async def test_escaping_paths_are_refused_before_reaching_the_pod(env: Env, path: str) -> None:
    provider, fake = env
    sandbox = await _sandbox(provider)
    execs = fake.count("exec")
    with pytest.raises(SandboxPathError):
        await sandbox.read_file(path)
    with pytest.raises(SandboxPathError):
        await sandbox.write_file(path, "x")
    with pytest.raises(SandboxPathError):
        await sandbox.list_dir(path)
    assert fake.count("exec") == execs


async def test_symlinks_are_never_followed(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    await sandbox.execute_command(
        f"ln -s /etc {WS}/etc-link && ln -s /etc/hostname {WS}/host && "
        f"mkdir -p {WS}/d && echo inside > {WS}/d/f && ln -s {WS}/d/f {WS}/in-link"
    )
    for path in (f"{WS}/host", f"{WS}/etc-link/hostname", f"{WS}/in-link"):
        with pytest.raises(SandboxPathError, match="symbolic link"):
            await sandbox.read_file(path)
        with pytest.raises(SandboxPathError, match="symbolic link"):
            await sandbox.download_bytes(path)
    with pytest.raises(SandboxPathError):
        await sandbox.write_file(f"{WS}/etc-link/evil", "x")
    with pytest.raises(SandboxPathError):
        await sandbox.write_file(f"{WS}/in-link", "x", append=True)
    assert not await sandbox.is_file(f"{WS}/in-link")
    assert await sandbox.is_file(f"{WS}/d/f")
    listing = await sandbox.list_dir(WS)
    assert {f"{WS}/etc-link@", f"{WS}/host@", f"{WS}/in-link@"} <= set(listing)
    assert not any(p.startswith(f"{WS}/etc-link/") for p in listing)
    assert [m.path for m in await sandbox.grep("inside", WS)] == [f"{WS}/d/f"]


async def test_skills_are_read_only(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    with pytest.raises(SandboxPathError, match="read-only"):
        await sandbox.write_file("/mnt/skills/x.md", "x")
    with pytest.raises(SandboxPathError, match="outside the sandbox"):
        await sandbox.write_file("/mnt/user-data/top.txt", "x")


async def test_list_glob_and_grep(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    await sandbox.execute_command(
        "mkdir -p src/pkg/deep node_modules/x && "
        "printf 'def main():\\n    return 42\\nMAIN = 1\\n' > src/app.py && "
        "printf 'import os\\n# TODO fix\\n' > src/pkg/util.py && "
        "printf 'todo: later\\n' > src/pkg/deep/notes.md && "
        "printf 'x\\0y' > src/blob.bin && echo hidden > node_modules/x/i.js"
    )
    assert await sandbox.list_dir(WS, max_depth=1) == [f"{WS}/node_modules/", f"{WS}/src/"]
    two = await sandbox.list_dir(WS)
    assert f"{WS}/src/app.py" in two and f"{WS}/src/pkg/" in two
    assert f"{WS}/src/pkg/util.py" not in two
    assert await sandbox.glob("**/*.py", WS) == [f"{WS}/src/app.py", f"{WS}/src/pkg/util.py"]
    assert await sandbox.glob("src/*.py", WS) == [f"{WS}/src/app.py"]
    assert await sandbox.glob("src/p*", WS) == [f"{WS}/src/pkg/"]
    assert await sandbox.glob("*.md", WS) == []
    with pytest.raises(SandboxPathError):
        await sandbox.glob("../*", WS)

    found = await sandbox.grep("todo", WS)
    assert [(m.path, m.line_number, m.line) for m in found] == [
        (f"{WS}/src/pkg/deep/notes.md", 1, "todo: later"),
        (f"{WS}/src/pkg/util.py", 2, "# TODO fix"),
    ]
    assert [m.path for m in await sandbox.grep("todo", WS, case_sensitive=True)] == [
        f"{WS}/src/pkg/deep/notes.md"
    ]
    assert [m.line for m in await sandbox.grep(r"\d+", WS, glob="*.py")] == [
        "    return 42",
        "MAIN = 1",
    ]
    assert await sandbox.grep("return (", WS, literal=True) == []
    assert len(await sandbox.grep("e", WS, max_results=2)) == 2
    with pytest.raises(SandboxError, match="invalid regular expression"):
        await sandbox.grep("return (", WS)


# --- lifecycle --------------------------------------------------------------------


async def test_cold_acquire_creates_and_watches_warm_acquire_does_not(env: Env) -> None:
    provider, fake = env
    await provider.start()
    fake.reset_counts()
    sandbox_id = await provider.acquire("t1", user_id="alice")
    assert fake.count("create") == 1
    assert fake.count("watch") == 1
    # The pod cap is counted in the cluster (other replicas create pods too):
    # one list before the create and one after it, on the cold path only.
    assert fake.count("list") == 2

    await provider.release(sandbox_id)
    fake.reset_counts()
    assert await provider.acquire("t1", user_id="alice") == sandbox_id
    assert fake.count("create") == 0
    assert fake.count("list") == 0
    assert fake.count("watch") == 0
    assert fake.count("update") == 1  # marks it active and proves it is ready

    sandbox = provider.get(sandbox_id)
    assert sandbox is not None
    fake.reset_counts()
    await sandbox.execute_command("true")
    await sandbox.execute_command("true")
    assert dict(fake.calls) == {"exec": 2}


async def test_pod_name_labels_and_annotations(env: Env) -> None:
    provider, fake = env
    sandbox_id = await provider.acquire("thread-9", user_id="bob")
    key = sandbox_key("deerflow", "bob", "thread-9")
    assert sandbox_id == sandbox_name(key)
    assert len(sandbox_id) <= 63 and sandbox_id.islower()
    pod = fake.pod(NS, sandbox_id)
    assert pod is not None
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[LABEL_SANDBOX] == key and labels[LABEL_STATE] == "active"
    assert annotations[ANN_USER_ID] == "bob" and annotations[ANN_THREAD_ID] == "thread-9"
    assert ANN_LAST_ACTIVITY in annotations and ANN_SPEC_HASH in annotations
    other = await provider.acquire("thread-9", user_id="carol")
    assert other != sandbox_id

    await provider.release(sandbox_id)
    pod = fake.pod(NS, sandbox_id)
    assert pod is not None and pod["metadata"]["labels"][LABEL_STATE] == "idle"


async def test_a_restarted_server_finds_the_same_pod(
    k8s: Callable[..., Any], tmp_path: Path
) -> None:
    async with k8s() as (provider, fake):
        sandbox = await _sandbox(provider)
        await sandbox.write_file(f"{WS}/keep.txt", "kept")
        config = provider.config
        restarted = KubernetesSandboxProvider(config=config)
        try:
            await restarted.start()
            fake.reset_counts()
            again = await restarted.acquire("t1", user_id="alice")
            assert again == sandbox.id
            assert fake.count("create") == 0 and fake.count("list") == 0
            second = restarted.get(again)
            assert second is not None
            assert await second.read_file(f"{WS}/keep.txt") == "kept"
        finally:
            await restarted.aclose()


async def test_create_conflict_reuses_the_pod_another_server_made(env: Env) -> None:
    provider, fake = env
    other = KubernetesSandboxProvider(config=provider.config)
    try:
        first = await other.acquire("t1", user_id="alice")
        await provider.start()
        # This server's first look misses it (the other server created it just after).
        fake.fail("update", 404, f'pods "{first}" not found', reason="NotFound", name=first)
        fake.reset_counts()
        sandbox = await _sandbox(provider)
        assert sandbox.id == first
        assert fake.count("create") == 1  # answered 409 Conflict
        assert len(fake.pods(NS)) == 1
        assert (await sandbox.execute_command("echo shared")).output == "shared\n"
    finally:
        await other.aclose()


async def test_readiness_timeout_is_a_clear_error(k8s: Callable[..., Any]) -> None:
    async with k8s(ready_timeout_seconds=1, cluster={"ready_delay": None}) as (provider, fake):
        await provider.start()
        fake.reset_counts()
        with pytest.raises(SandboxError, match=r"not ready within 1s \(phase Pending\)"):
            await provider.acquire("t1", user_id="alice")
        assert fake.count("watch") == 1
        assert fake.count("create") == 1


async def test_unstartable_image_fails_fast_and_is_removed(k8s: Callable[..., Any]) -> None:
    waiting = {"reason": "InvalidImageName", "message": 'couldn\'t parse image name "Bad Image"'}
    async with k8s(cluster={"start_waiting": waiting}) as (provider, fake):
        with pytest.raises(SandboxError, match="cannot start \\(InvalidImageName"):
            await provider.acquire("t1", user_id="alice")
        assert fake.pods(NS) == {}


async def test_pod_deleted_mid_thread_is_recreated_on_the_next_call(env: Env) -> None:
    provider, fake = env
    sandbox = await _sandbox(provider)
    await sandbox.write_file(f"{WS}/before.txt", "x")
    await fake.delete_pod(NS, sandbox.pod_name)
    assert fake.pods(NS) == {}
    fake.reset_counts()
    result = await sandbox.execute_command("ls; echo alive")
    assert result.exit_code == 0
    assert result.output.startswith("[sandbox: this thread's pod was gone")
    assert result.output.endswith("alive\n")
    assert "before.txt" not in result.output
    assert fake.count("create") == 1
    assert (await sandbox.execute_command("echo again")).output == "again\n"


async def test_evicted_pod_is_replaced(env: Env) -> None:
    provider, fake = env
    sandbox = await _sandbox(provider)
    await fake.evict(NS, sandbox.pod_name)
    await sandbox.write_file(f"{WS}/after.txt", "fresh")
    assert await sandbox.read_file(f"{WS}/after.txt") == "fresh"
    pod = fake.pod(NS, sandbox.pod_name)
    assert pod is not None and pod["status"]["phase"] == "Running"


async def test_a_terminating_pod_is_awaited_with_a_watch_before_replacement(env: Env) -> None:
    provider, fake = env
    sandbox = await _sandbox(provider)
    name = sandbox.pod_name
    await fake.set_pod(NS, name, {"metadata": {"finalizers": ["example.com/slow-shutdown"]}})
    await fake.evict(NS, name)
    fake.reset_counts()
    task = asyncio.create_task(sandbox.execute_command("echo replaced"))

    def watching_the_deleted_pod() -> bool:
        pod = fake.pod(NS, name)
        deleting = pod is not None and bool(pod["metadata"].get("deletionTimestamp"))
        return deleting and fake.count("watch") >= 1

    # Wait for a condition, never for a time: under load the provider may take
    # long to get there (the deadline only bounds a broken provider).
    await eventually(
        lambda: task.done() or watching_the_deleted_pod(), message="the provider never watched"
    )
    assert not task.done()  # waiting for the old pod to go, on a watch
    await fake.finish_termination(NS, name)
    result = await task
    assert result.output.endswith("replaced\n")
    assert fake.count("watch") == 2  # the old pod going away, the new one becoming ready
    assert fake.count("create") == 1


async def test_rbac_refusal_is_a_clear_error(env: Env) -> None:
    provider, fake = env
    fake.fail(
        "create",
        403,
        'pods is forbidden: User "system:serviceaccount:deerflow:deerflow-api" cannot create '
        'resource "pods" in API group "" in the namespace "deerflow-sandbox"',
    )
    with pytest.raises(SandboxError, match=r"may not create a sandbox pod .*Role and RoleBinding"):
        await provider.acquire("t1", user_id="alice")
    # Nothing is stuck: the next attempt works.
    sandbox = await _sandbox(provider)
    assert (await sandbox.execute_command("echo ok")).output == "ok\n"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (
            403,
            'pods "deerflow-sbx-x" is forbidden: exceeded quota: sandbox-quota, requested: '
            "pods=1, used: pods=20, limited: pods=20",
        ),
        (422, "Pod is invalid: quota exceeded for requests.memory"),
    ],
)
async def test_quota_refusal_is_a_clear_error(env: Env, status: int, message: str) -> None:
    provider, fake = env
    fake.fail("create", status, message, reason="Forbidden" if status == 403 else "Invalid")
    with pytest.raises(SandboxError, match=r"(?i)quota refused to create a sandbox pod") as info:
        await provider.acquire("t1", user_id="alice")
    assert "quota" in str(info.value)


async def test_limit_range_refusal_is_a_clear_error(env: Env) -> None:
    provider, fake = env
    fake.fail(
        "create",
        403,
        'pods "deerflow-sbx-x" is forbidden: maximum cpu usage per Container is 2, but limit is 4',
    )
    with pytest.raises(SandboxError, match="LimitRange refused to create a sandbox pod"):
        await provider.acquire("t1", user_id="alice")


async def test_an_image_without_python_is_a_clear_error(k8s: Callable[..., Any]) -> None:
    async with k8s(python="python3-not-installed") as (provider, _fake):
        sandbox = await _sandbox(provider)
        with pytest.raises(SandboxError, match="needs python3 in the image"):
            await sandbox.execute_command("true")


async def test_exec_forbidden_is_a_clear_error(env: Env) -> None:
    provider, fake = env
    sandbox = await _sandbox(provider)
    fake.fail_exec("forbidden")
    with pytest.raises(SandboxError, match=r"pods/exec get and create"):
        await sandbox.execute_command("true")
    assert (await sandbox.execute_command("echo fine")).output == "fine\n"


async def test_dropped_exec_stream_is_a_clear_error(env: Env) -> None:
    provider, fake = env
    sandbox = await _sandbox(provider)
    fake.fail_exec("drop")
    with pytest.raises(SandboxError, match="dropped during the operation"):
        await sandbox.execute_command("echo lost")
    assert (await sandbox.execute_command("echo back")).output == "back\n"


async def test_api_server_errors_are_clear(env: Env) -> None:
    provider, fake = env
    await provider.start()
    fake.fail("update", 500, "etcdserver: request timed out", reason="InternalError")
    with pytest.raises(SandboxError, match="Kubernetes API is unavailable"):
        await provider.acquire("t1", user_id="alice")


async def test_pod_cap_gives_a_clear_error(k8s: Callable[..., Any]) -> None:
    clock = Clock()
    async with k8s(max_pods=2, idle_timeout_seconds=60, clock=clock) as (provider, fake):
        first = await provider.acquire("t1", user_id="alice")
        await provider.acquire("t2", user_id="alice")
        fake.reset_counts()
        with pytest.raises(SandboxError, match="pod limit is reached \\(2 live pods"):
            await provider.acquire("t3", user_id="alice")
        assert fake.count("create") == 0
        await provider.release(first)
        clock.now += 61
        assert await provider.reap() == [first]
        assert await provider.acquire("t3", user_id="alice")


# --- reaping, reconciliation, warm pool ------------------------------------------------


async def test_idle_reaper_deletes_only_idle_pods(k8s: Callable[..., Any]) -> None:
    clock = Clock()
    async with k8s(idle_timeout_seconds=600, clock=clock) as (provider, fake):
        idle = await provider.acquire("idle", user_id="alice")
        busy = await provider.acquire("busy", user_id="alice")
        await provider.release(idle)
        clock.now += 300
        assert await provider.reap() == []
        clock.now += 301
        assert await provider.reap() == [idle]
        assert set(fake.pods(NS)) == {busy}
        assert provider.get(idle) is None
        # A thread that comes back after reaping gets a new pod.
        again = await _sandbox(provider, "idle")
        assert (await again.execute_command("echo back")).output.endswith("back\n")


async def test_reaper_never_deletes_a_pod_reactivated_since_it_listed(
    k8s: Callable[..., Any],
) -> None:
    clock = Clock()
    async with k8s(idle_timeout_seconds=60, clock=clock) as (provider, fake):
        sandbox_id = await provider.acquire("t1", user_id="alice")
        await provider.release(sandbox_id)
        clock.now += 61
        original = provider._list_pods

        async def list_then_reactivate() -> Any:
            pods = await original()
            # Another server acquires the thread between this reaper's list and delete.
            await fake.set_pod(NS, sandbox_id, {"metadata": {"labels": {LABEL_STATE: "active"}}})
            return pods

        provider._list_pods = list_then_reactivate  # type: ignore[method-assign]
        assert await provider.reap() == []
        provider._list_pods = original  # type: ignore[method-assign]
        assert sandbox_id in fake.pods(NS)


async def test_reaper_task_runs_in_the_server_and_stops_with_the_provider(
    k8s: Callable[..., Any],
) -> None:
    clock = Clock()
    async with k8s(idle_timeout_seconds=5, reaper_interval_seconds=0.05, clock=clock) as (
        provider,
        fake,
    ):
        sandbox_id = await provider.acquire("t1", user_id="alice")
        await provider.release(sandbox_id)
        task = provider._reaper
        assert task is not None and not task.done()
        clock.now += 10
        await eventually(lambda: not fake.pods(NS), message="the reaper never removed the pod")
        assert fake.pods(NS) == {}
        await provider.reset()
        assert task.done() and provider._reaper is None


async def test_reaper_removes_dead_and_stale_active_pods(k8s: Callable[..., Any]) -> None:
    clock = Clock()
    async with k8s(idle_timeout_seconds=60, stale_active_seconds=3600, clock=clock) as (
        provider,
        fake,
    ):
        dead = await provider.acquire("dead", user_id="alice")
        await provider.release(dead)
        await fake.evict(NS, dead)
        await provider.reset()  # a previous process left an 'active' pod behind
        restarted = KubernetesSandboxProvider(config=provider.config, clock=clock)
        try:
            stale = await restarted.acquire("stale", user_id="alice")
            await restarted.reset()
            # The process that held it is gone: its heartbeat expires, then the
            # next Lease holder's reconciliation deletes the dead pod and idles it.
            clock.now += provider.config.lease_duration_seconds + 1
            await restarted.start()
            assert set(fake.pods(NS)) == {stale}
            assert fake.pods(NS)[stale]["metadata"]["labels"][LABEL_STATE] == "idle"
            clock.now += 61
            assert await restarted.reap() == [stale]
        finally:
            await restarted.aclose()


async def test_orphan_reconciliation_at_start(k8s: Callable[..., Any]) -> None:
    clock = Clock()
    async with k8s(warm_pool_size=0, clock=clock) as (provider, fake):
        cfg = provider.config
        await provider._connect()
        api = provider._api

        def create(manifest: dict[str, Any]) -> None:
            api.create_namespaced_pod(NS, manifest)

        now = clock()
        key = sandbox_key(cfg.server_id, "dora", "t-adopt")
        left_key = sandbox_key(cfg.server_id, "u", "t")
        dead_key = sandbox_key(cfg.server_id, "u", "t3")
        leftover, dead = sandbox_name(left_key), sandbox_name(dead_key)
        manifests = [
            pod_manifest(
                cfg,
                name=leftover,
                state="active",
                now=now - 30,
                key=left_key,
                user_id="u",
                thread_id="t",
            ),
            pod_manifest(
                cfg,
                name="deerflow-sbx-w-claimed",
                state="active",
                now=now,
                key=key,
                user_id="dora",
                thread_id="t-adopt",
            ),
            pod_manifest(cfg, name="deerflow-sbx-w-oldspec", state="warm", now=now),
            pod_manifest(
                cfg, name=dead, state="idle", now=now, key=dead_key, user_id="u", thread_id="t3"
            ),
        ]
        manifests[2]["metadata"]["annotations"][ANN_SPEC_HASH] = "0000000000000000"
        other_server = pod_manifest(
            cfg.model_copy(update={"server_id": "someone-else"}),
            name="foreign",
            state="active",
            now=now,
        )
        for manifest in [*manifests, other_server]:
            await asyncio.to_thread(create, manifest)
        await eventually(
            lambda: all(
                (p.get("status") or {}).get("phase") == "Running" for p in fake.pods(NS).values()
            )
        )
        await fake.evict(NS, dead)

        await provider.start()
        report = provider.last_reconcile
        assert sorted(report["deleted"]) == sorted([dead, "deerflow-sbx-w-oldspec"])
        assert sorted(report["idled"]) == sorted([leftover, "deerflow-sbx-w-claimed"])
        assert report["adopted"] == ["deerflow-sbx-w-claimed"]
        pods = fake.pods(NS)
        assert set(pods) == {leftover, "deerflow-sbx-w-claimed", "foreign"}
        assert pods["foreign"]["metadata"]["labels"][LABEL_STATE] == "active"

        # The adopted warm pod serves its thread: no new pod.
        fake.reset_counts()
        sandbox = await _sandbox(provider, "t-adopt", "dora")
        assert sandbox.pod_name == "deerflow-sbx-w-claimed"
        assert fake.count("create") == 0 and fake.count("list") == 0


async def _wait_warm(fake: FakeKubernetes, count: int) -> list[str]:
    def warm() -> list[str] | None:
        names = [
            name
            for name, pod in fake.pods(NS).items()
            if pod["metadata"]["labels"][LABEL_STATE] == "warm"
            and (pod.get("status") or {}).get("phase") == "Running"
        ]
        return sorted(names) if len(names) >= count else None

    found: list[str] = await eventually(warm, message=f"the warm pool never reached {count}")
    return found


async def test_warm_pool_is_claimed_atomically_and_replenished(k8s: Callable[..., Any]) -> None:
    async with k8s(warm_pool_size=2) as (provider, fake):
        await provider.start()
        warm = await _wait_warm(fake, 2)
        fake.reset_counts()
        sandbox = await _sandbox(provider)
        assert sandbox.pod_name in warm
        assert fake.count("watch") == 0
        pod = fake.pod(NS, sandbox.pod_name)
        assert pod is not None
        assert pod["metadata"]["labels"][LABEL_STATE] == "active"
        assert pod["metadata"]["labels"][LABEL_SANDBOX] == sandbox_key("deerflow", "alice", "t1")
        assert (await sandbox.execute_command("echo warm")).output == "warm\n"
        # The pool is topped up in the background.
        assert len(await _wait_warm(fake, 2)) == 2
        assert len(fake.pods(NS)) == 3


async def test_warm_claim_conflict_moves_to_the_next_pod(k8s: Callable[..., Any]) -> None:
    async with k8s(warm_pool_size=2) as (provider, fake):
        await provider.start()
        warm = await _wait_warm(fake, 2)
        original = provider._list_pods
        raced: list[str] = []

        async def list_then_race() -> Any:
            pods = await original()
            # Another server claims the oldest warm pod between our list and our patch.
            first = sorted((p for p in pods if p.state == "warm"), key=lambda p: p.created or 0)[0]
            await fake.set_pod(NS, first.name, {"metadata": {"labels": {LABEL_STATE: "active"}}})
            raced.append(first.name)
            return pods

        provider._list_pods = list_then_race  # type: ignore[method-assign]
        fake.reset_counts()
        sandbox = await _sandbox(provider)
        provider._list_pods = original  # type: ignore[method-assign]
        assert raced and sandbox.pod_name != raced[0] and sandbox.pod_name in warm
        assert fake.count("create") == 0 or fake.count("create") <= 2  # only pool top-ups
        assert fake.count("update") >= 3  # activate miss, conflicting claim, winning claim


async def test_pvc_workspace_creates_a_claim_per_thread(k8s: Callable[..., Any]) -> None:
    async with k8s(workspace={"type": "pvc", "size_limit": "2Gi", "storage_class": "fast"}) as (
        provider,
        fake,
    ):
        sandbox = await _sandbox(provider)
        pod = fake.pod(NS, sandbox.pod_name)
        assert pod is not None
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "user-data")
        assert volume == {
            "name": "user-data",
            "persistentVolumeClaim": {"claimName": f"{sandbox.id}-data"},
        }
        assert fake.count("pvc-create") == 1


async def test_http_uploads_are_copied_into_the_pod(
    k8s: Callable[..., Any], tmp_path: Path
) -> None:
    data_root = tmp_path / "data"
    uploads = thread_paths(data_root, "alice", "t1").uploads

    def seed() -> None:
        uploads.mkdir(parents=True)
        (uploads / "report.csv").write_text("a,b\n1,2\n")
        (uploads / "image.png").write_bytes(b"\x89PNG\x00\x01")
        (uploads / "link").symlink_to("/etc/hostname")

    await asyncio.to_thread(seed)
    async with k8s(data_root=data_root) as (provider, fake):
        sandbox = await _sandbox(provider)
        assert await sandbox.read_file("/mnt/user-data/uploads/report.csv") == "a,b\n1,2\n"
        assert (
            await sandbox.download_bytes("/mnt/user-data/uploads/image.png") == b"\x89PNG\x00\x01"
        )
        assert await sandbox.list_dir("/mnt/user-data/uploads") == [
            "/mnt/user-data/uploads/image.png",
            "/mnt/user-data/uploads/report.csv",
        ]
        # Nothing new: the next run's acquire copies nothing.
        await provider.release(sandbox.id)
        fake.reset_counts()
        await provider.acquire("t1", user_id="alice")
        assert fake.count("exec") == 0
        # A new upload between runs arrives with the next acquire.
        (uploads / "notes.txt").write_text("new")
        await provider.release(sandbox.id)
        fake.reset_counts()
        await provider.acquire("t1", user_id="alice")
        assert fake.count("exec") == 1
        assert await sandbox.read_file("/mnt/user-data/uploads/notes.txt") == "new"
        # A recreated pod gets them all again before its first operation.
        await fake.delete_pod(NS, sandbox.pod_name)
        result = await sandbox.execute_command("ls /mnt/user-data/uploads")
        assert result.output.split()[-3:] == ["image.png", "notes.txt", "report.csv"]


async def test_long_commands_do_not_starve_api_calls(k8s: Callable[..., Any]) -> None:
    async with k8s(api_threads=2, exec_threads=4) as (provider, fake):
        first = await _sandbox(provider, "t1")
        second = await _sandbox(provider, "t2")
        sleepers = [
            # Long enough never to end on its own: the test cancels them.
            asyncio.create_task(sandbox.execute_command("sleep 300"))
            for sandbox in (first, second)
        ]
        await eventually(lambda: fake.count("exec") >= 2)
        # Both API threads' worth of execs are running; acquiring still works.
        third = await provider.acquire("t3", user_id="alice")
        await provider.release(third)
        assert not any(task.done() for task in sleepers)
        for task in sleepers:
            task.cancel()
        await asyncio.gather(*sleepers, return_exceptions=True)


async def test_cancelling_a_run_stops_its_command_in_the_pod(env: Env) -> None:
    provider, _fake = env
    sandbox = await _sandbox(provider)
    task = asyncio.create_task(sandbox.execute_command(f"echo $$ > {WS}/pid; sleep 60"))

    async def written_pid() -> str:
        with contextlib.suppress(SandboxError):
            return (await sandbox.read_file(f"{WS}/pid")).strip()
        return ""

    pid = await eventually(written_pid)
    assert pid
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    check = await sandbox.execute_command(
        f"for i in $(seq 100); do st=$(awk '/^State:/{{print $2}}' /proc/{pid}/status 2>/dev/null); "
        'if [ -z "$st" ] || [ "$st" = Z ]; then echo gone; exit 0; fi; sleep 0.1; done; echo alive'
    )
    assert check.output.strip() == "gone"


async def test_no_blocking_calls_on_the_event_loop(env: Env) -> None:
    provider, _fake = env
    with blockbuster_ctx(["sandbox", "kubernetes", "urllib3", "websocket"]):
        sandbox = await _sandbox(provider)
        await sandbox.write_file(f"{WS}/a.txt", "x")
        assert await sandbox.read_file(f"{WS}/a.txt") == "x"
        await sandbox.execute_command("true")
        await provider.release(sandbox.id)
        await provider.reap()


async def test_acquire_rejects_unsafe_identity_before_any_api_call(env: Env) -> None:
    provider, fake = env
    for user, thread in (("", "t1"), ("../a", "t1"), ("a", "t/1"), ("a", "x" * 65)):
        with pytest.raises(SandboxError, match="unsafe"):
            await provider.acquire(thread, user_id=user)
    assert sum(fake.calls.values()) == 0
    assert provider.get("deerflow-sbx-unknown") is None
    await provider.release("deerflow-sbx-unknown")  # unknown ids are ignored


def test_format_time_round_trips() -> None:
    from sandbox._k8s_pods import parse_time

    assert parse_time(format_time(1_800_000_000.0)) == 1_800_000_000.0
    assert parse_time("not a time") is None
