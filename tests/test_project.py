"""Project-level contracts: the two commands, the pinned set, langgraph.json."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib

import pytest

from tests.support.server import PROJECT_ROOT


def test_langgraph_json_registers_both_graphs_and_the_app() -> None:
    config = json.loads((PROJECT_ROOT / "langgraph.json").read_text())
    assert config["graphs"] == {
        "lead_agent": "./graphs/lead_agent.py:make_lead_agent",
        "subagent": "./graphs/subagent.py:make_subagent",
    }
    assert config["http"]["app"] == "./app/server.py:app"
    assert config["python_version"] == "3.11"
    assert config["dependencies"] == ["."]
    assert config["env"] == ".env"


def test_lock_pins_every_package_with_hashes_and_no_urls() -> None:
    lock = (PROJECT_ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s\\]+)", lock, flags=re.M)
    assert len(pins) > 50
    blocks = re.split(r"\n(?=[A-Za-z0-9])", lock.split("\n", 2)[2])
    for block in blocks:
        if "==" in block:
            assert "--hash=sha256:" in block, block.splitlines()[0]
    assert "://" not in lock


def test_dependencies_have_bounded_ranges() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "deerflow-server"
    assert project["requires-python"] == ">=3.11"
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        # a range with both ends, or an exact pin (langgraph-checkpoint-postgres:
        # the saver extends that version's SQL)
        exact = "==" in requirement
        assert exact or (">=" in requirement and "<" in requirement), requirement


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_install_is_a_no_op_when_up_to_date() -> None:
    """`make test` ran `make install` first, so a second install has nothing to do."""
    result = subprocess.run(
        ["make", "-q", "install"], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
