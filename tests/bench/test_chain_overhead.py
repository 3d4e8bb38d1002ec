"""The benchmark runs from its documented entry point and reports its ratios.

Timings are not asserted (unit tests never assert wall-clock times); the run is
tiny and only proves the command works end to end and writes its results.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import chain_overhead


def test_quick_run_prints_the_ratio_and_writes_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "chain_overhead.md"
    assert chain_overhead.main(["--rounds", "1", "--steps", "2", "--output", str(output)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"chain_overhead_ratio=\d+\.\d\d", lines[-1])
    report = output.read_text(encoding="utf-8")
    assert "| full lead chain (build_middlewares) |" in report
    assert "synthetic: 30 pass-through wrap middlewares" in report
    assert "| full lead chain, a skill activated with /bench-skill |" in report
    assert re.fullmatch(r"skills_active_ratio=\d+\.\d\d", lines[-2])
    assert lines[-1] in report.replace("`", "")


def test_the_deferred_tools_variant_assembles_issue_17s_middlewares(tmp_path: Path) -> None:
    from middlewares.chain import build_middlewares

    extra, configurable = chain_overhead.VARIANTS["deferred tools, tool search, view image"]
    inputs = chain_overhead.chain_inputs(tmp_path, extra, "variant", configurable)
    names = {type(m).__name__ for m in build_middlewares(inputs)}
    assert {
        "ViewImageMiddleware",
        "McpRoutingMiddleware",
        "DeferredToolPromotionAuditMiddleware",
        "DeferredToolFilterMiddleware",
    } <= names
