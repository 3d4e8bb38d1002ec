"""Two Kubernetes sandbox providers (two server replicas) sharing one fake cluster.

Each test builds replica A through ``kubernetes_provider`` and replica B as a
second provider with the same configuration against the same cluster: the
real client, HTTP and websocket, for both.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox._k8s_pods import ANN_HEARTBEAT, ANN_HOLDER, LABEL_STATE
from sandbox.base import SandboxError
from sandbox.kubernetes import KubernetesSandboxProvider
from tests.support.fake_kubernetes import FakeKubernetes, kubernetes_provider, namespaces_supported

NS = "deerflow-sandbox"

_reason = namespaces_supported()
if _reason is not None:
    if os.environ.get("CI"):
        raise RuntimeError(_reason)
    pytestmark = pytest.mark.skip(reason=_reason)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


Replicas = tuple[KubernetesSandboxProvider, KubernetesSandboxProvider, FakeKubernetes, Clock]


@pytest.fixture
def replicas(tmp_path: Path) -> Callable[..., Any]:
    """Factory: ``async with replicas(**config) as (a, b, fake, clock)``."""

    @contextlib.asynccontextmanager
    async def make(**config: Any) -> AsyncIterator[Replicas]:
        clock = Clock()
        async with kubernetes_provider(tmp_path, clock=clock, **config) as (a, fake):
            b = KubernetesSandboxProvider(a.config, clock=clock)
            try:
                yield a, b, fake, clock
            finally:
                await b.aclose()

    return make


def _live(fake: FakeKubernetes) -> dict[str, dict[str, Any]]:
    return {
        name: pod
        for name, pod in fake.pods(NS).items()
        if not pod["metadata"].get("deletionTimestamp")
    }


def _warm(fake: FakeKubernetes) -> list[str]:
    return sorted(
        name
        for name, pod in _live(fake).items()
        if pod["metadata"]["labels"].get(LABEL_STATE) == "warm"
    )


async def _settle(fake: FakeKubernetes, predicate: Callable[[], bool]) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the cluster never settled: {sorted(_live(fake))}")


async def test_replica_reaper_never_deletes_a_pod_another_replica_holds(
    replicas: Callable[..., Any],
) -> None:
    async with replicas(idle_timeout_seconds=60, lease_duration_seconds=30) as (a, b, fake, clock):
        await b.start()  # B owns maintenance
        sandbox_id = await a.acquire("t1", user_id="alice")  # a run on replica A
        pod = fake.pod(NS, sandbox_id)
        assert pod is not None
        assert pod["metadata"]["annotations"][ANN_HOLDER] == a.replica_id
        # A long model call: no sandbox operation for longer than the idle timeout,
        # while A's maintenance loop keeps beating for the pod its run holds.
        for _ in range(4):
            clock.now += 25
            assert await a.heartbeat() == [sandbox_id]
            assert await b.reap() == []
            assert b.is_leader
        assert sandbox_id in _live(fake)
        assert fake.pod(NS, sandbox_id)["metadata"]["labels"][LABEL_STATE] == "active"  # type: ignore[index]
        # Released: the idle clock applies, and B's reaper frees it after the timeout.
        await a.release(sandbox_id)
        assert ANN_HOLDER not in fake.pod(NS, sandbox_id)["metadata"]["annotations"]  # type: ignore[index]
        clock.now += 61
        assert await b.reap() == [sandbox_id]


async def test_replica_that_died_frees_its_pods_after_the_idle_timeout(
    replicas: Callable[..., Any],
) -> None:
    async with replicas(idle_timeout_seconds=60, lease_duration_seconds=30) as (a, b, fake, clock):
        sandbox_id = await a.acquire("t1", user_id="alice")  # A leads and holds the pod
        await b.start()
        assert a.is_leader and not b.is_leader
        await a.reset()  # A dies: no release, no Lease hand-over, no more heartbeats
        assert await b.reap() == []  # A's Lease is still valid: B does nothing
        assert not b.is_leader
        clock.now += 31  # the Lease and the heartbeat expire
        assert await b.reap() == []  # B leads now; the pod was busy 31 s ago
        assert b.is_leader
        assert fake.pod(NS, sandbox_id)["metadata"]["annotations"][ANN_HEARTBEAT]  # type: ignore[index]
        clock.now += 30  # idle past the timeout (not the 6-hour stale-active limit)
        assert await b.reap() == [sandbox_id]


async def test_replica_warm_pool_stays_at_its_size_and_surplus_is_trimmed(
    replicas: Callable[..., Any],
) -> None:
    async with replicas(warm_pool_size=2, lease_duration_seconds=30) as (a, b, fake, clock):
        await a.start()
        await b.start()
        await _settle(fake, lambda: len(_warm(fake)) == 2)
        assert a.is_leader and not b.is_leader
        # Both replicas keep running their maintenance passes: only the holder acts.
        for _ in range(3):
            await a.reap()
            await b.reap()
        await asyncio.sleep(0.1)
        assert len(_warm(fake)) == 2
        # A claim on the non-leader replica: the leader tops the pool up again.
        claimed = await b.acquire("t1", user_id="bob")
        assert b.get(claimed).pod_name.startswith("deerflow-sbx-w-")  # type: ignore[union-attr]
        await a.reap()
        await _settle(fake, lambda: len(_warm(fake)) == 2)
        # Surplus left behind (an old replica's top-up) is trimmed to the size.
        for extra in ("x1", "x2"):
            await a._pod_call(
                "create",
                a._api.create_namespaced_pod,
                NS,
                _warm_manifest(a, extra, clock()),
            )
        await _settle(fake, lambda: len(_warm(fake)) == 4)
        # Deletes are conditioned on what the pass listed: a pod that changed
        # meanwhile (just became Ready) is left for the next pass. It converges.
        for _ in range(10):
            await a.reap()
            if len(_warm(fake)) == 2:
                break
            await asyncio.sleep(0.05)
        await _settle(fake, lambda: len(_warm(fake)) == 2)
        assert not b.is_leader  # B never acted


def _warm_manifest(provider: KubernetesSandboxProvider, token: str, now: float) -> dict[str, Any]:
    from sandbox._k8s_pods import pod_manifest, warm_pod_name

    return pod_manifest(provider.config, name=warm_pod_name(token), state="warm", now=now)


async def test_replica_pod_cap_holds_across_both(replicas: Callable[..., Any]) -> None:
    async with replicas(max_pods=2) as (a, b, fake, _clock):
        await a.acquire("t1", user_id="alice")
        await b.acquire("t2", user_id="alice")
        with pytest.raises(SandboxError, match="pod limit is reached"):
            await a.acquire("t3", user_id="alice")
        with pytest.raises(SandboxError, match="pod limit is reached"):
            await b.acquire("t4", user_id="alice")
        assert len(_live(fake)) == 2


async def test_replica_pod_cap_holds_when_both_create_at_once(
    replicas: Callable[..., Any],
) -> None:
    async with replicas(max_pods=1) as (a, b, fake, _clock):
        await a.start()
        await b.start()
        results = await asyncio.gather(
            a.acquire("t1", user_id="alice"),
            b.acquire("t2", user_id="bob"),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, SandboxError)]
        # At most one wins (both may yield in a close race); the cap is never exceeded.
        assert len(errors) >= 1, results
        assert all("pod limit is reached" in str(e) for e in errors)
        await _settle(fake, lambda: len(_live(fake)) == 2 - len(errors))
        retry = a if isinstance(results[0], SandboxError) else b
        thread, user = ("t1", "alice") if retry is a else ("t2", "bob")
        if len(errors) == 2:  # nobody holds a pod: a retry gets one
            await retry.acquire(thread, user_id=user)
            assert len(_live(fake)) == 1


async def test_replica_reconciliation_has_one_owner(replicas: Callable[..., Any]) -> None:
    async with replicas(lease_duration_seconds=30) as (a, b, fake, clock):
        sandbox_id = await a.acquire("t1", user_id="alice")  # A starts first: A leads
        await b.start()
        assert a.is_leader and not b.is_leader
        assert b.last_reconcile == {"deleted": [], "idled": [], "adopted": []}
        # B's start did not idle the pod A's run uses.
        assert fake.pod(NS, sandbox_id)["metadata"]["labels"][LABEL_STATE] == "active"  # type: ignore[index]
        lease = fake.lease(NS, a.lease_name)
        assert lease is not None and lease["spec"]["holderIdentity"] == a.replica_id
        # While A renews, B never takes over; once A stops (shutdown), B does.
        clock.now += 20
        assert await a._lead()
        assert not await b._lead()
        await a.aclose()
        assert await b._lead()
        assert fake.lease(NS, a.lease_name)["spec"]["holderIdentity"] == b.replica_id  # type: ignore[index]


async def test_deleting_a_thread_removes_its_pod_and_volume_on_any_replica(
    replicas: Callable[..., Any],
) -> None:
    async with replicas(workspace={"type": "pvc"}) as (a, b, fake, _clock):
        gone = await a.acquire("t1", user_id="alice")
        kept = await a.acquire("t2", user_id="alice")
        await a.release(gone)
        assert fake.count("pvc-create") == 2
        # The thread is deleted through replica B (another API pod).
        await b.delete_thread("t1", user_id="alice")
        assert gone not in _live(fake) and kept in _live(fake)
        assert fake.count("pvc-delete") == 1
        claims = {
            key[2]
            for key, obj in fake.objects.items()
            if getattr(key[0], "plural", None) == "persistentvolumeclaims" and not obj.deleted
        }
        assert claims == {f"{kept}-data"}
        await b.delete_thread("t1", user_id="alice")  # idempotent
        with pytest.raises(SandboxError, match="unsafe"):
            await b.delete_thread("../t2", user_id="alice")


async def test_shutdown_releases_sandboxes_only_after_runs_drain(
    replicas: Callable[..., Any],
) -> None:
    from app.server import release_after_drain

    async with replicas() as (a, _b, fake, _clock):
        sandbox_id = await a.acquire("t1", user_id="alice")
        sandbox = a.get(sandbox_id)
        assert sandbox is not None
        closing = asyncio.create_task(release_after_drain(a, timeout=30, poll=0.02))
        await asyncio.sleep(0.2)
        assert not closing.done()  # the run still holds its sandbox: not closed
        assert a.in_use == 1
        assert (await sandbox.execute_command("echo draining")).output == "draining\n"
        await a.release(sandbox_id)  # the run finished draining
        assert await asyncio.wait_for(closing, 5) is True
        with pytest.raises(SandboxError, match="closed"):
            await a.acquire("t2", user_id="alice")
        # The Lease was handed on at close: another replica leads at once.
        lease = fake.lease(NS, a.lease_name)
        assert lease is not None and not lease["spec"].get("holderIdentity")


async def test_shutdown_gives_up_waiting_after_the_drain_period(
    replicas: Callable[..., Any],
) -> None:
    from app.server import release_after_drain

    async with replicas() as (a, _b, _fake, _clock):
        await a.acquire("t1", user_id="alice")
        assert await release_after_drain(a, timeout=0.1, poll=0.02) is False


async def test_the_servers_lifespan_exits_after_ours() -> None:
    """Why the drain wait exists: the server's lifespan wraps the app's one."""
    from langgraph_api.timing import combine_lifespans

    order: list[str] = []

    def tracked(name: str) -> Any:
        @contextlib.asynccontextmanager
        async def lifespan(_: Any) -> AsyncIterator[None]:
            yield
            order.append(name)

        return lifespan

    async with combine_lifespans(tracked("server"), tracked("ours"))(None):
        pass
    assert order == ["ours", "server"]
