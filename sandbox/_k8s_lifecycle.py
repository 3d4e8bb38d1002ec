"""Kubernetes sandbox provider, part 3: a thread's pod exists and is ready."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from sandbox._k8s_api import _api_error, _Conflict, _Entry, _NotFound
from sandbox._k8s_maintenance import _Maintenance
from sandbox._k8s_pods import (
    ANN_HEARTBEAT,
    ANN_HOLDER,
    LABEL_STATE,
    STATE_ACTIVE,
    STATE_IDLE,
    PodView,
    format_time,
    pod_manifest,
    pvc_manifest,
)
from sandbox.base import (
    SandboxError,
)

logger = logging.getLogger("sandbox.kubernetes")


class _Lifecycle(_Maintenance):
    """Find, claim or create a thread's pod and wait until it is ready."""

    async def _ensure_pod(self, entry: _Entry, *, activate: bool) -> None:
        """Make ``entry`` point at a ready pod. Caller holds ``entry.lock``."""
        deadline = time.monotonic() + self.config.ready_timeout_seconds
        had_pod = entry.had_pod
        try:
            if activate:
                pod: PodView | None = await self._patch_pod(entry.pod_name, self._activation(entry))
            else:
                pod = await self._read_pod(entry.pod_name)
        except _NotFound:
            pod = None
        if pod is not None and (pod.dead or pod.terminating):
            logger.info("sandbox pod %s is %s; replacing it", pod.name, pod.phase)
            await self._delete_pod(pod.name)
            await self._wait_gone(pod.name, deadline)
            pod = None
        if pod is not None:
            if not pod.ready:
                pod = await self._wait_ready(pod.name, pod.resource_version, deadline)
                if not activate:
                    await self._patch_pod(pod.name, self._activation(entry))
            self._mark_ready(entry, pod.name, created=False, had_pod=had_pod)
            return
        if entry.pod_name != entry.sandbox_id:
            entry.pod_name = entry.sandbox_id  # the claimed warm pod is gone
        if self.config.warm_pool_size and await self._claim_warm(entry):
            self._mark_ready(entry, entry.pod_name, created=True, had_pod=had_pod)
            return
        await self._create_and_wait(entry, deadline)
        self._mark_ready(entry, entry.pod_name, created=True, had_pod=had_pod)

    def _mark_ready(self, entry: _Entry, name: str, *, created: bool, had_pod: bool) -> None:
        if created or name != entry.pod_name:
            entry.synced.clear()  # a new pod has none of the uploads
            entry.skills_digest = None
            entry.sync_pending = True
        entry.pod_name = name
        entry.ready = True
        entry.verify = False
        if created and had_pod:
            entry.recreated = True
        entry.had_pod = True

    async def _live_pods(self) -> list[PodView]:
        return [p for p in await self._list_pods() if not p.terminating and not p.dead]

    async def _check_cap(self) -> None:
        """Refuse a new pod when the cluster already runs ``max_pods`` of this deployment.

        Counted from the API (by label), never from memory: other replicas
        create pods too.
        """
        live = await self._live_pods()
        self._pod_count = len(live)
        if len(live) >= self.config.max_pods:
            raise self._cap_error()

    async def _hold_cap(self, name: str) -> None:
        """After creating ``name``: if replicas raced past the cap, this pod yields.

        Whoever lists after the last racing create sees more than ``max_pods``
        and deletes its own pod, so an overflow never persists; when both
        racers list late, both yield (a retry then succeeds). Creation times
        have one-second resolution, so they cannot pick a single winner.
        """
        live = await self._live_pods()
        self._pod_count = len(live)
        if len(live) > self.config.max_pods and any(p.name == name for p in live):
            await self._delete_pod(name)
            raise self._cap_error()

    def _cap_error(self) -> SandboxError:
        return SandboxError(
            f"the sandbox pod limit is reached ({self.config.max_pods} live pods in "
            f"namespace {self.config.namespace!r}); try again when other threads go idle"
        )

    async def _create_and_wait(self, entry: _Entry, deadline: float) -> None:
        await self._check_cap()
        pvc_name = None
        if self.config.workspace.type == "pvc":
            pvc_name = await self._ensure_pvc(entry)
        manifest = pod_manifest(
            self.config,
            name=entry.sandbox_id,
            state=STATE_ACTIVE,
            now=self._clock(),
            key=entry.key,
            user_id=entry.user_id,
            thread_id=entry.thread_id,
            pvc_name=pvc_name,
        )
        manifest["metadata"]["annotations"].update(
            {ANN_HOLDER: self.replica_id, ANN_HEARTBEAT: format_time(self._clock())}
        )
        for _attempt in range(2):
            try:
                created = PodView(
                    await self._pod_call(
                        "create a sandbox pod",
                        self._api.create_namespaced_pod,
                        self.config.namespace,
                        manifest,
                    )
                )
            except _Conflict:
                # Another server (or an earlier run) created it: reuse it.
                try:
                    existing = await self._patch_pod(entry.sandbox_id, self._activation(entry))
                except _NotFound:
                    continue
                if existing.dead or existing.terminating:
                    await self._delete_pod(existing.name)
                    await self._wait_gone(existing.name, deadline)
                    continue
                pod = existing
                if not pod.ready:
                    pod = await self._wait_ready(pod.name, pod.resource_version, deadline)
                entry.pod_name = pod.name
                return
            self._pod_count += 1
            await self._hold_cap(created.name)
            if created.ready:
                entry.pod_name = created.name
                return
            pod = await self._wait_ready(created.name, created.resource_version, deadline)
            entry.pod_name = pod.name
            return
        raise SandboxError(f"could not create sandbox pod {entry.sandbox_id}: it kept conflicting")

    async def _ensure_pvc(self, entry: _Entry) -> str:
        name = f"{entry.sandbox_id}-data"
        manifest = pvc_manifest(
            self.config, name=name, key=entry.key, user_id=entry.user_id, thread_id=entry.thread_id
        )
        with contextlib.suppress(_Conflict):
            await self._pod_call(
                "create a workspace volume claim",
                self._api.create_namespaced_persistent_volume_claim,
                self.config.namespace,
                manifest,
            )
        return name

    async def _wait_ready(
        self, name: str, resource_version: str | None, deadline: float
    ) -> PodView:
        """Watch the pod until it is ready, fails, vanishes or the deadline passes."""
        if deadline - time.monotonic() <= 0:
            raise self._not_ready_error(name, None)
        outcome, pod = await self._watch(name, resource_version, deadline)
        if outcome == "ready" and pod is not None:
            return pod
        if outcome == "fatal" and pod is not None:
            await self._delete_pod(name)
            raise SandboxError(
                f"sandbox pod {name} cannot start ({pod.fatal_reason()}); check "
                "sandbox.kubernetes.image and the pod settings"
            )
        if outcome == "deleted":
            raise SandboxError(f"sandbox pod {name} was deleted while starting; try again")
        raise self._not_ready_error(name, pod)

    async def _watch(
        self,
        name: str,
        resource_version: str | None,
        deadline: float,
        *,
        until_gone: bool = False,
    ) -> tuple[str, PodView | None]:
        """Run the blocking watch in a worker thread; stop it from here on timeout or cancel."""
        holder: dict[str, Any] = {}
        remaining = max(0.0, deadline - time.monotonic())
        future = asyncio.ensure_future(
            self._call(self._watch_pod, name, resource_version, deadline, holder, until_gone)
        )
        try:
            return await asyncio.wait_for(asyncio.shield(future), remaining + 1.0)
        except TimeoutError:
            holder["stopped"] = True
            stopper = holder.get("watch")
            if stopper is not None:
                stopper.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(future, 5.0)
            return "timeout", holder.get("last")
        except asyncio.CancelledError:
            holder["stopped"] = True
            stopper = holder.get("watch")
            if stopper is not None:
                stopper.stop()
            raise
        except ApiException as exc:
            raise _api_error(exc, "watch a sandbox pod", self.config.namespace) from None
        except OSError as exc:
            raise SandboxError(f"the watch on sandbox pod {name} failed ({exc})") from None

    def _not_ready_error(self, name: str, pod: PodView | None) -> SandboxError:
        reason = pod.pending_reason() if pod is not None else "no status yet"
        self._spawn(self._mark_idle_quietly(name), "k8s-sandbox-mark-idle")
        return SandboxError(
            f"sandbox pod {name} was not ready within "
            f"{self.config.ready_timeout_seconds:g}s ({reason})"
        )

    async def _mark_idle_quietly(self, name: str) -> None:
        with contextlib.suppress(Exception):
            await self._patch_pod(name, {"metadata": {"labels": {LABEL_STATE: STATE_IDLE}}})

    def _watch_pod(
        self,
        name: str,
        resource_version: str | None,
        deadline: float,
        holder: dict[str, Any],
        until_gone: bool = False,
    ) -> tuple[str, PodView | None]:
        """Blocking watch (worker thread). Returns (outcome, last pod seen).

        Outcomes: ``ready``, ``fatal`` (cannot start), ``deleted``, ``timeout``.
        With ``until_gone`` only the deletion ends it.
        """
        last: PodView | None = None
        for _attempt in range(3):
            if holder.get("stopped"):
                break
            w = watch.Watch()
            holder["watch"] = w
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            kwargs: dict[str, Any] = {
                "field_selector": f"metadata.name={name}",
                "timeout_seconds": int(remaining) + 1,
                "_request_timeout": remaining,
            }
            if resource_version:
                kwargs["resource_version"] = resource_version
            try:
                for event in w.stream(
                    self._api.list_namespaced_pod, self.config.namespace, **kwargs
                ):
                    raw = event.get("raw_object")
                    if not isinstance(raw, dict):
                        continue
                    pod = PodView(raw)
                    if pod.name != name:
                        continue  # selectors are the server's job, but check anyway
                    last = holder["last"] = pod
                    if event.get("type") == "DELETED":
                        return "deleted", pod
                    if until_gone:
                        continue
                    if pod.ready:
                        return "ready", pod
                    if pod.fatal_reason() is not None:
                        return "fatal", pod
                    if time.monotonic() > deadline:
                        return "timeout", last
            except ApiException as exc:
                if exc.status == 410:
                    resource_version = None  # too old: watch from now on
                    continue
                if holder.get("stopped") or time.monotonic() >= deadline:
                    break
                raise
            except Exception as exc:
                if holder.get("stopped") or time.monotonic() >= deadline:
                    break
                raise OSError(f"{type(exc).__name__}: {exc}") from exc
            finally:
                w.stop()
            break
        return "timeout", last

    async def _wait_gone(self, name: str, deadline: float) -> None:
        """Wait (with a watch) until a deleted pod is really gone, so its name is free."""
        try:
            pod = await self._read_pod(name)
        except _NotFound:
            return
        outcome, _pod = await self._watch(name, pod.resource_version, deadline, until_gone=True)
        if outcome != "deleted":
            raise SandboxError(f"sandbox pod {name} did not go away in time; try again")
