"""Local-provider variants for tests: counting, unavailable, detached storage."""

from __future__ import annotations

from typing import Any

from runtime.config import Settings
from sandbox.base import SandboxError
from sandbox.local import LocalSandbox, LocalSandboxProvider

__all__ = ["CountingLocalProvider", "DetachedStorageProvider", "UnavailableProvider"]


class CountingLocalProvider(LocalSandboxProvider):
    """Counts acquisitions and releases."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acquired = 0
        self.released: list[str] = []

    async def acquire(self, thread_id: str, *, user_id: str) -> str:
        self.acquired += 1
        return await super().acquire(thread_id, user_id=user_id)

    async def release(self, sandbox_id: str) -> None:
        self.released.append(sandbox_id)


class UnavailableProvider(LocalSandboxProvider):
    """Every acquisition fails, like a cluster out of capacity."""

    async def acquire(self, thread_id: str, *, user_id: str) -> str:
        raise SandboxError("no sandbox capacity left (test provider)")


class DetachedStorageProvider(LocalSandboxProvider):
    """Like a remote sandbox: its files live apart from the host thread directory."""

    @classmethod
    def from_settings(cls, settings: Settings) -> DetachedStorageProvider:
        provider = super().from_settings(settings)
        provider.data_root = settings.data_root_path() / "detached-storage"
        return provider  # type: ignore[return-value]

    def _create(self, sandbox_id: str, user_id: str, thread_id: str) -> LocalSandbox:
        sandbox = super()._create(sandbox_id, user_id, thread_id)
        sandbox.shares_host_user_data = False
        return sandbox
