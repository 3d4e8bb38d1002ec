"""The README a newcomer follows literally (issue 22 item 10)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import PROJECT_ROOT

README = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_the_readme_is_a_first_ten_minutes_page() -> None:
    assert len(README.splitlines()) < 250
    for must in ("make dev", "make test", "PORT=", "Ctrl-C", "DEV_FLAGS", "--tunnel", "Safari"):
        assert must in README, must
    assert "messages-tuple" in _blocks("python")[0] and "messages-tuple" in _blocks("js")[0]
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "DEV_FLAGS ?=" in makefile and "$(DEV_FLAGS)" in makefile


def test_every_link_resolves() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if target.startswith("http"):
            continue
        assert (PROJECT_ROOT / target).exists(), target


def test_the_config_yaml_example_loads(tmp_path: Path) -> None:
    from runtime.config import load_settings

    example = next(block for block in _blocks("yaml") if "models:" in block)
    path = tmp_path / "config.yaml"
    path.write_text(example)
    settings = load_settings(path)
    assert settings.default_model.use == "langchain_openai:ChatOpenAI"


@pytest.mark.blackbox
async def test_the_python_example_streams_the_demo_from_a_dev_server(
    tmp_path: Path, dev_server: Any
) -> None:
    server = dev_server()  # the built-in defaults: the offline demo tour
    script = _blocks("python")[0].replace("http://127.0.0.1:2024", server.url)
    path = tmp_path / "example.py"
    await asyncio.to_thread(path.write_text, script)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "offline demo model" in done.stdout, done.stdout
