"""The sandbox benchmark still runs (tiny sample) and renders every figure."""

from __future__ import annotations

import pytest

from bench.sandbox_providers import METRICS, render, run
from tests.support.fake_kubernetes import namespaces_supported
from tests.support.server import server_blocking_detector_paused


@pytest.mark.skipif(namespaces_supported() is not None, reason="needs the fake exec endpoint")
async def test_benchmark_runs_and_reports_every_metric() -> None:
    # The benchmark is a standalone script, not server code: it may block.
    with server_blocking_detector_paused():
        results = await run(iterations=2)
    k8s = next(m for m in results if m.name == "kubernetes")
    assert set(k8s.samples) == set(METRICS)
    assert all(len(values) == 2 and min(values) > 0 for values in k8s.samples.values())
    report = render(results, 2, "a note")
    for label in METRICS.values():
        assert f"| {label} | kubernetes |" in report
    assert "a note" in report
