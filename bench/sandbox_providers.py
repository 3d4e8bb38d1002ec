"""Sandbox providers side by side: acquire latency (cold and warm) and operation round trips.

    python -m bench.sandbox_providers [--iterations N] [--output bench/results/sandbox_providers.md]

The Kubernetes provider runs against the fake cluster of the test suite
(``tests/support/fake_kubernetes.py``): the real ``kubernetes`` client over
HTTP and websocket, a kmock API server and an exec endpoint that really runs
each command in a mount namespace. So the figures are the provider's own cost
(API calls, watch, exec handshake, the in-pod helper) without a real
cluster's scheduling, image pull and network; on a cluster a cold acquire adds
the pod start-up time (seconds), which no machine here can measure.

Every provider importable in this build is measured in the same run, and the
report gives ratios against the local provider when it is present.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import platform
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.base import Sandbox, SandboxProvider

__all__ = ["main", "run"]

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox_providers.md"
PAYLOAD = bytes(range(256)) * 256  # 64 KiB, every byte value
METRICS = {
    "cold_acquire": "cold acquire (new thread: create the sandbox)",
    "warm_acquire": "warm acquire (the thread's sandbox exists)",
    "exec_round_trip": "exec round trip (`true`)",
    "write_read_64k": "write + read back 64 KiB",
}


@dataclass
class Measured:
    name: str
    note: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)
    missing: str | None = None


async def _timed(samples: list[float], action: Callable[[], Awaitable[Any]]) -> Any:
    start = time.perf_counter()
    result = await action()
    samples.append(time.perf_counter() - start)
    return result


async def _measure(
    provider: SandboxProvider, iterations: int, label: str
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {key: [] for key in METRICS}
    ids: list[str] = []
    threads = [f"{label}-{index}" for index in range(iterations)]
    for thread in threads:
        start = time.perf_counter()
        ids.append(await provider.acquire(thread, user_id="bench"))
        samples["cold_acquire"].append(time.perf_counter() - start)
    for thread, sandbox_id in zip(threads, ids, strict=True):
        await provider.release(sandbox_id)
        start = time.perf_counter()
        await provider.acquire(thread, user_id="bench")
        samples["warm_acquire"].append(time.perf_counter() - start)
    sandbox = provider.get(ids[0])
    assert isinstance(sandbox, Sandbox)
    await sandbox.execute_command("true")  # first exec pays one-time costs
    for _ in range(iterations):
        result = await _timed(samples["exec_round_trip"], lambda: sandbox.execute_command("true"))
        assert result.exit_code == 0, result.output

    async def write_read() -> None:
        await sandbox.upload_bytes("/mnt/user-data/workspace/bench.bin", PAYLOAD)
        assert await sandbox.download_bytes("/mnt/user-data/workspace/bench.bin") == PAYLOAD

    for _ in range(iterations):
        await _timed(samples["write_read_64k"], write_read)
    for sandbox_id in ids:
        await provider.release(sandbox_id)
    return samples


@contextlib.asynccontextmanager
async def _local(root: Path) -> AsyncIterator[SandboxProvider | None]:
    try:
        module = importlib.import_module("sandbox.local")
    except ImportError:
        yield None
        return
    provider = module.LocalSandboxProvider(root / "local-data")
    try:
        yield provider
    finally:
        await provider.reset()


async def run(iterations: int) -> list[Measured]:
    from tests.support.fake_kubernetes import kubernetes_provider, namespaces_supported

    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as raw:
        root = Path(raw)
        async with _local(root) as local:
            measured = Measured("local", note="host subprocesses (not isolated)")
            if local is None:
                measured.missing = (
                    "sandbox.local is not in this build yet (it comes with the sandbox "
                    "issue); rerun after the merge to fill this column"
                )
            else:
                measured.samples = await _measure(local, iterations, "local")
            results.append(measured)
        reason = namespaces_supported()
        measured = Measured("kubernetes", note="fake cluster: kmock API + websocket exec")
        if reason is not None:
            measured.missing = reason
        else:
            async with kubernetes_provider(
                root / "k8s", cluster={"ready_delay": 0.0}, max_pods=iterations + 10
            ) as (provider, _fake):
                await provider.start()
                measured.samples = await _measure(provider, iterations, "k8s")
        results.append(measured)
    return results


def _ms(value: float) -> str:
    return f"{value * 1000:.2f}"


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def render(results: list[Measured], iterations: int, note: str | None = None) -> str:
    lines = [
        "# Sandbox providers: acquire latency and round trips",
        "",
        "Generated by `make bench-sandbox` (`python -m bench.sandbox_providers`); "
        f"{iterations} samples per figure, all providers in one run on "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}.",
        "",
        "The Kubernetes figures use the test suite's fake cluster: the real `kubernetes` "
        "client (HTTP API calls, a watch for readiness, websocket pods/exec) against an "
        "in-process API server whose exec endpoint really runs the in-pod helper. They are "
        "the provider's own overhead; a real cluster adds scheduling, image pull and "
        "container start to a cold acquire (typically seconds, or far less from the warm "
        "pool) and network latency to every call.",
        "",
        *([note, ""] if note else []),
        "| operation | provider | median ms | p90 ms | mean ms |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    by_name = {m.name: m for m in results}
    for key, label in METRICS.items():
        for measured in results:
            values = measured.samples.get(key)
            if not values:
                lines.append(f"| {label} | {measured.name} | n/a | n/a | n/a |")
                continue
            lines.append(
                f"| {label} | {measured.name} | {_ms(statistics.median(values))} | "
                f"{_ms(_p90(values))} | {_ms(statistics.fmean(values))} |"
            )
    lines += ["", "## Ratios (median, kubernetes / local)", ""]
    local, k8s = by_name.get("local"), by_name.get("kubernetes")
    if local and k8s and local.samples and k8s.samples:
        lines += ["| operation | kubernetes / local |", "| --- | ---: |"]
        for key, label in METRICS.items():
            ratio = statistics.median(k8s.samples[key]) / statistics.median(local.samples[key])
            lines.append(f"| {label} | {ratio:.1f}x |")
    else:
        lines.append("Not available in this run:")
        lines.append("")
        for measured in results:
            if measured.missing:
                lines.append(f"- **{measured.name}**: {measured.missing}")
    lines += [
        "",
        "## Providers",
        "",
        *[f"- **{m.name}**: {m.note}" for m in results],
        "",
        "What a warm acquire costs in API calls is asserted by the tests, not timed: "
        "a warm acquire is one PATCH (no create, no list, no watch); a cold one is "
        "one create, one watch and two lists (the pod cap is counted in the cluster, "
        "across replicas) (`tests/sandbox/test_kubernetes.py`).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--note", help="a line about this run, written into the report")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.iterations))
    report = render(results, args.iterations, args.note)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
