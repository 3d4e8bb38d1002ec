"""The memory benchmark runs from its entry point and writes its report (no timings asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import memory


def test_quick_run_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "memory.md"
    args = ["--rounds", "1", "--memories", "20", "--conversations", "4", "--output", str(output)]
    assert memory.main(args) == 0
    report = output.read_text(encoding="utf-8")
    assert "Recall of 5 memories out of 20" in report
    assert "Extraction of 4 conversations" in report
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("memory_recall_ms=")
