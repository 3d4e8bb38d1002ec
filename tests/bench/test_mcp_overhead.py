"""The MCP overhead benchmark runs from its entry point and writes its report (no timings asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import mcp_overhead


def test_quick_run_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "mcp.md"
    assert mcp_overhead.main(["--calls", "3", "--output", str(output)]) == 0
    assert "the agent's MCP tool" in output.read_text(encoding="utf-8")
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("mcp_overhead_ratio=")
