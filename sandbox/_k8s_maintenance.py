"""Kubernetes sandbox provider, part 2: warm pool, idle reaper, reconciliation."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

from sandbox._k8s_api import _Conflict, _Entry, _NotFound, _ProviderBase
from sandbox._k8s_pods import (
    ANN_THREAD_ID,
    ANN_USER_ID,
    LABEL_STATE,
    STATE_ACTIVE,
    STATE_IDLE,
    STATE_WARM,
    PodView,
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
        if self.config.warm_pool_size and not self._replenishing and self._started:
            self._spawn(self._replenish(), "k8s-sandbox-replenish")

    async def _replenish(self, pods: list[PodView] | None = None) -> int:
        """Create warm pods up to the pool size (within the pod cap); returns how many."""
        if self._replenishing:
            return 0
        self._replenishing = True
        try:
            if pods is None:
                pods = await self._list_pods()
            live = [p for p in pods if not p.terminating and not p.dead]
            warm = [p for p in live if p.state == STATE_WARM]
            self._pod_count = len(live)
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

    async def _reaper_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.reaper_interval_seconds)
            try:
                await self.reap()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the reaper must survive API hiccups
                logger.warning("sandbox reaper pass failed: %s", exc)

    async def reap(self) -> list[str]:
        """One reaper pass: delete idle, stale and dead pods; top up the warm pool."""
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
        if pod.state == STATE_WARM:
            return pod.annotations.get("deerflow.dev/spec-hash") != self._spec_hash
        last = pod.last_activity or pod.created
        if last is None:
            return False
        idle_for = now - last
        if pod.state == STATE_ACTIVE:
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

        Dead pods and warm pods of another pod template are deleted; pods left
        'active' by a previous server process are marked idle so the reaper's
        idle clock applies to them; claimed warm pods are remembered so their
        threads find them again.
        """
        await self._connect()
        pods = await self._list_pods()
        report: dict[str, list[str]] = {"deleted": [], "idled": [], "adopted": []}
        held = {e.pod_name for e in self._entries.values() if e.refcount > 0}
        for pod in pods:
            if pod.terminating or pod.name in held:
                continue
            if pod.dead or (
                pod.state == STATE_WARM
                and pod.annotations.get("deerflow.dev/spec-hash") != self._spec_hash
            ):
                if await self._delete_pod(pod.name, pod.resource_version):
                    report["deleted"].append(pod.name)
                continue
            if pod.state == STATE_ACTIVE:
                with contextlib.suppress(_NotFound):
                    await self._patch_pod(
                        pod.name, {"metadata": {"labels": {LABEL_STATE: STATE_IDLE}}}
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
