"""The layer contract (``[tool.importlinter]`` in pyproject.toml) holds.

``make lint`` runs ``lint-imports`` too; running it here keeps ``make test`` and
a bare ``pytest`` honest about the architecture as well.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_the_contract_names_every_code_package() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = set(config["tool"]["importlinter"]["root_packages"])
    packages = {
        p.name
        for p in ROOT.iterdir()
        # tests, benchmarks and the deploy manifest checker are tooling, not the server
        if p.is_dir()
        and (p / "__init__.py").exists()
        and p.name not in {"tests", "bench", "deploy"}
    }
    assert packages <= declared, packages - declared
