"""Kubernetes sandbox provider, part 2: warm pool, idle reaper, reconciliation.

Every server replica runs this, but only one acts at a time: the holder of a
``coordination.k8s.io`` Lease (one per ``server_id``) reconciles, reaps and
keeps the warm pool; the others only renew their bid. Independently, each
replica marks the pods it uses with a holder and a heartbeat annotation that
it refreshes while a run holds the pod; the reaper (whoever runs it) never
deletes a pod with a fresh heartbeat, and treats a stale one (its replica
died) by the usual idle rules. The pod cap is counted from the cluster, not
from memory, so it holds across replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import secrets
import time
from typing import Any

from sandbox._k8s_api import _Conflict, _Entry, _NotFound, _ProviderBase
from sandbox._k8s_pods import (
    ANN_HEARTBEAT,
    ANN_HOLDER,
    ANN_THREAD_ID,
    ANN_USER_ID,
    LABEL_STATE,
    STATE_ACTIVE,
    STATE_IDLE,
    STATE_WARM,
    PodView,
    format_time,
    pod_manifest,
    sandbox_name,
    warm_pod_name,
)
from sandbox.base import (
    SandboxError,
)

logger = logging.getLogger("sandbox.kubernetes")


class _Maintenance(_ProviderBase):
    """Background upkeep of the deployment's pods."""

    async def _claim_warm(self, entry: _Entry) -> bool:
        """Claim a ready warm pod atomically (a patch conditioned on its resourceVersion)."""
        pods = await self._list_pods()
        for pod in pods:
            if pod.key == entry.key and pod.ready and pod.name != entry.sandbox_id:
                entry.pod_name = pod.name  # another server already claimed one for this thread
                await self._patch_pod(pod.name, self._activation(entry))
                return True
        candidates = sorted(
            (
                p
                for p in pods
                if p.state == STATE_WARM
                and p.ready
                and p.annotations.get("deerflow.dev/spec-hash") == self._spec_hash
            ),
            key=lambda p: p.created or 0.0,
        )
        for pod in candidates:
            body = self._activation(entry)
            body["metadata"]["resourceVersion"] = pod.resource_version
            try:
                await self._patch_pod(pod.name, body)
            except (_Conflict, _NotFound):
                continue
            entry.pod_name = pod.name
            self._schedule_replenish()
            return True
        self._schedule_replenish()
        return False

    def _schedule_replenish(self) -> None:
        if (
            self.config.warm_pool_size
            and not self._replenishing
            and self._started
            and self.is_leader
        ):
            self._spawn(self._replenish(), "k8s-sandbox-replenish")

    async def _replenish(self, pods: list[PodView] | None = None) -> int:
        """Keep exactly the pool size of warm pods (within the pod cap).

        Creates the missing ones and deletes surplus ones (several replicas or
        an old configuration may have left too many). Returns how many it
        created. Only the Lease holder calls it.
        """
        if self._replenishing:
            return 0
        self._replenishing = True
        try:
            if pods is None:
                pods = await self._list_pods()
            live = [p for p in pods if not p.terminating and not p.dead]
            warm = sorted(
                (p for p in live if p.state == STATE_WARM),
                key=lambda p: (p.created or 0.0, p.name),
            )
            self._pod_count = len(live)
            for pod in warm[self.config.warm_pool_size :]:  # surplus: newest go first
                if await self._delete_pod(pod.name, pod.resource_version):
                    logger.info("deleted surplus warm sandbox pod %s", pod.name)
            missing = min(self.config.warm_pool_size - len(warm), self.config.max_pods - len(live))
            created = 0
            for _ in range(max(0, missing)):
                name = warm_pod_name(secrets.token_hex(6))
                manifest = pod_manifest(self.config, name=name, state=STATE_WARM, now=self._clock())
                try:
                    await self._pod_call(
                        "create a warm sandbox pod",
                        self._api.create_namespaced_pod,
                        self.config.namespace,
                        manifest,
                    )
                except (SandboxError, _Conflict) as exc:
                    logger.warning("could not create a warm sandbox pod: %s", exc)
                    break
                self._pod_count += 1
                created += 1
            return created
        finally:
            self._replenishing = False

    # --- one owner: the Lease ---------------------------------------------------

    @property
    def lease_name(self) -> str:
        return f"deerflow-sandbox-{self.config.server_id}"

    async def _lead(self) -> bool:
        """Take or renew the maintenance Lease; True while this replica holds it.

        Optimistic concurrency (a patch conditioned on the Lease's
        resourceVersion) makes two replicas bidding at once end with one
        holder. A holder that stops renewing loses it after the duration.
        """
        await self._connect()
        now = self._clock()
        duration = max(1, int(self.config.lease_duration_seconds))
        stamp = _micro_time(now)
        namespace = self.config.namespace
        try:
            lease = await self._pod_call(
                "read the sandbox Lease",
                self._coordination.read_namespaced_lease,
                self.lease_name,
                namespace,
            )
        except _NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.lease_name, "namespace": namespace},
                "spec": {
                    "holderIdentity": self.replica_id,
                    "leaseDurationSeconds": duration,
                    "acquireTime": stamp,
                    "renewTime": stamp,
                    "leaseTransitions": 0,
                },
            }
            try:
                await self._pod_call(
                    "create the sandbox Lease",
                    self._coordination.create_namespaced_lease,
                    namespace,
                    body,
                )
            except _Conflict:
                return self._set_leader(False)
            return self._set_leader(True)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or None
        renewed = _parse_micro_time(spec.get("renewTime"))
        held_for = float(spec.get("leaseDurationSeconds") or duration)
        expired = renewed is None or now > renewed + held_for
        if holder not in (None, self.replica_id) and not expired:
            return self._set_leader(False)
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": (lease.get("metadata") or {}).get("resourceVersion")},
            "spec": {
                "holderIdentity": self.replica_id,
                "leaseDurationSeconds": duration,
                "renewTime": stamp,
            },
        }
        if holder != self.replica_id:
            patch["spec"]["acquireTime"] = stamp
            patch["spec"]["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        try:
            await self._pod_call(
                "renew the sandbox Lease",
                self._coordination.patch_namespaced_lease,
                self.lease_name,
                namespace,
                patch,
                _content_type="application/merge-patch+json",
            )
        except (_Conflict, _NotFound):
            return self._set_leader(False)
        return self._set_leader(True)

    def _set_leader(self, leading: bool) -> bool:
        if leading != self.is_leader:
            logger.info(
                "sandbox replica %s %s the maintenance Lease",
                self.replica_id,
                "holds" if leading else "does not hold",
            )
        self.is_leader = leading
        return leading

    async def _release_lease(self) -> None:
        """Give the Lease up (shutdown) so another replica takes over at once."""
        if not self.is_leader or self._core is None:
            return
        self.is_leader = False
        with contextlib.suppress(Exception):
            await self._pod_call(
                "release the sandbox Lease",
                self._coordination.patch_namespaced_lease,
                self.lease_name,
                self.config.namespace,
                {"spec": {"holderIdentity": None, "renewTime": None}},
                _content_type="application/merge-patch+json",
            )

    # --- holder heartbeats --------------------------------------------------------

    def _holder_fresh(self, pod: PodView, now: float) -> bool:
        """A replica said it uses this pod within the lease duration."""
        beat = pod.heartbeat
        return (
            bool(pod.holder)
            and beat is not None
            and now - beat <= self.config.lease_duration_seconds
        )

    async def heartbeat(self) -> list[str]:
        """Refresh holder and heartbeat on every pod a run of this replica holds."""
        now = self._clock()
        body = {
            "metadata": {
                "annotations": {ANN_HOLDER: self.replica_id, ANN_HEARTBEAT: format_time(now)}
            }
        }
        beaten: list[str] = []
        for entry in list(self._entries.values()):
            if entry.refcount <= 0 or not entry.ready:
                continue
            try:
                await self._patch_pod(entry.pod_name, body)
            except _NotFound:
                entry.ready = False
                entry.verify = True
                continue
            beaten.append(entry.pod_name)
        return beaten

    def _maintenance_tick(self) -> float:
        return max(
            0.05, min(self.config.reaper_interval_seconds, self.config.lease_duration_seconds / 3.0)
        )

    async def _reaper_loop(self) -> None:
        """Every replica: heartbeats; the Lease holder also reaps (each reaper interval)."""
        next_reap = time.monotonic() + self.config.reaper_interval_seconds
        while True:
            await asyncio.sleep(self._maintenance_tick())
            try:
                await self.heartbeat()
                if time.monotonic() >= next_reap:
                    next_reap = time.monotonic() + self.config.reaper_interval_seconds
                    await self.reap()
                elif await self._lead() and self.config.warm_pool_size:
                    # Between reaper passes the Lease holder renews and tops the
                    # pool up: claims on other replicas cannot trigger it.
                    await self._replenish()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must survive API hiccups
                logger.warning("sandbox maintenance pass failed: %s", exc)

    async def reap(self) -> list[str]:
        """One reaper pass (Lease holder only): delete idle, stale and dead pods; keep the pool."""
        if not await self._lead():
            return []
        now = self._clock()
        pods = await self._list_pods()
        held = {e.pod_name for e in self._entries.values() if e.refcount > 0}
        deleted: list[str] = []
        for pod in pods:
            if pod.terminating or pod.name in held:
                continue
            if self._reapable(pod, now) and await self._delete_pod(pod.name, pod.resource_version):
                deleted.append(pod.name)
        self._forget(deleted)
        remaining = [p for p in pods if p.name not in deleted]
        if self.config.warm_pool_size:
            await self._replenish(remaining)
        else:
            self._pod_count = len([p for p in remaining if not p.terminating])
        if deleted:
            logger.info("sandbox reaper deleted %d pod(s): %s", len(deleted), ", ".join(deleted))
        return deleted

    def _reapable(self, pod: PodView, now: float) -> bool:
        if pod.dead:
            return True
        if self._holder_fresh(pod, now):
            return False  # some replica's run holds it
        # A stale holder means its replica is gone: the idle clock applies (an
        # 'active' pod without any holder falls under the stale-active rule).
        if pod.state == STATE_WARM:
            return pod.annotations.get("deerflow.dev/spec-hash") != self._spec_hash
        last = max(
            (t for t in (pod.last_activity, pod.heartbeat, pod.created) if t is not None),
            default=None,
        )
        if last is None:
            return False
        idle_for = now - last
        if pod.state == STATE_ACTIVE and not pod.holder:
            return idle_for > max(
                self.config.stale_active_seconds, self.config.idle_timeout_seconds
            )
        return idle_for > self.config.idle_timeout_seconds

    def _forget(self, names: list[str]) -> None:
        if not names:
            return
        gone = set(names)
        for sandbox_id, entry in list(self._entries.items()):
            if entry.pod_name in gone:
                entry.ready = False
                entry.verify = True
                if entry.refcount == 0:
                    self._entries.pop(sandbox_id, None)
                    self._sandboxes.pop(sandbox_id, None)

    async def reconcile(self) -> dict[str, list[str]]:
        """Start-up pass over the pods this deployment owns.

        Only the Lease holder does it. Dead pods and warm pods of another pod
        template are deleted; pods left 'active' by a server process that is
        gone (no fresh holder heartbeat) are marked idle so the reaper's
        idle clock applies to them; claimed warm pods are remembered so their
        threads find them again.
        """
        await self._connect()
        report: dict[str, list[str]] = {"deleted": [], "idled": [], "adopted": []}
        if not await self._lead():
            return report  # another replica owns reconciliation
        now = self._clock()
        pods = await self._list_pods()
        held = {e.pod_name for e in self._entries.values() if e.refcount > 0}
        for pod in pods:
            if (
                pod.terminating
                or pod.name in held
                or (not pod.dead and self._holder_fresh(pod, now))
            ):
                continue  # in use by a run on this or another replica
            if pod.dead or (
                pod.state == STATE_WARM
                and pod.annotations.get("deerflow.dev/spec-hash") != self._spec_hash
            ):
                if await self._delete_pod(pod.name, pod.resource_version):
                    report["deleted"].append(pod.name)
                continue
            if pod.state == STATE_ACTIVE:
                # Conditioned on what we listed: a replica that activated it since wins.
                with contextlib.suppress(_NotFound, _Conflict):
                    await self._patch_pod(
                        pod.name,
                        {
                            "metadata": {
                                "resourceVersion": pod.resource_version,
                                "labels": {LABEL_STATE: STATE_IDLE},
                                "annotations": {ANN_HOLDER: None, ANN_HEARTBEAT: None},
                            }
                        },
                    )
                    report["idled"].append(pod.name)
            key = pod.key
            user_id = pod.annotations.get(ANN_USER_ID)
            thread_id = pod.annotations.get(ANN_THREAD_ID)
            if key and user_id and thread_id and pod.name != sandbox_name(key):
                sandbox_id = sandbox_name(key)
                if sandbox_id not in self._entries:
                    self._entries[sandbox_id] = _Entry(
                        key=key,
                        sandbox_id=sandbox_id,
                        user_id=user_id,
                        thread_id=thread_id,
                        pod_name=pod.name,
                        had_pod=True,
                    )
                    report["adopted"].append(pod.name)
        self._pod_count = len(
            [p for p in pods if not p.terminating and p.name not in report["deleted"]]
        )
        for kind, names in report.items():
            if names:
                logger.info("sandbox reconciliation %s: %s", kind, ", ".join(names))
        return report


def _micro_time(epoch: float) -> str:
    """A Kubernetes MicroTime (what Lease times are)."""
    whole = int(epoch)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        + f".{int((epoch - whole) * 1e6):06d}Z"
    )


def _parse_micro_time(value: Any) -> float | None:
    """A MicroTime as the API returns it (``...Z`` or ``+00:00``, fraction optional)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()
