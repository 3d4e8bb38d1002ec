"""The provider contract suite (``tests/sandbox/contract.py``), run against the Kubernetes
provider on the fake cluster: real client, HTTP and websocket exec, commands really run."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandbox.kubernetes import KubernetesSandboxProvider
from tests.sandbox.contract import SandboxContract
from tests.support.fake_kubernetes import kubernetes_provider, namespaces_supported

_reason = namespaces_supported()
if _reason is not None:
    if os.environ.get("CI"):
        raise RuntimeError(_reason)
    pytestmark = pytest.mark.skip(reason=_reason)


class TestKubernetesSandboxContract(SandboxContract):
    # The helper keeps 64 KiB of a huge output in the pod; hold it to that.
    max_capped_output_bytes = 256 * 1024

    @pytest.fixture
    async def sandbox_provider(self, tmp_path: Path) -> AsyncIterator[KubernetesSandboxProvider]:
        async with kubernetes_provider(
            tmp_path, limits={"max_output_bytes": 64 * 1024, "search_timeout_seconds": 1}
        ) as (
            provider,
            _fake,
        ):
            yield provider
            await provider.reset()
