"""The server image: `langgraph dockerfile` output resolves every path it names."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import PROJECT_ROOT

PATH_VARIABLES = (
    "LANGSERVE_GRAPHS",
    "LANGGRAPH_HTTP",
    "LANGGRAPH_AUTH",
    "LANGGRAPH_CHECKPOINTER",
    "LANGGRAPH_STORE",
)


@pytest.fixture(scope="module")
def dockerfile(tmp_path_factory: pytest.TempPathFactory) -> str:
    target = tmp_path_factory.mktemp("image") / "Dockerfile"
    result = subprocess.run(
        [sys.executable, "-m", "langgraph_cli", "dockerfile", "-c", "langgraph.json", str(target)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env={"PATH": str(Path(sys.executable).parent), "LANGGRAPH_CLI_NO_ANALYTICS": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return target.read_text()


def _env(dockerfile: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for line in dockerfile.splitlines():
        if line.startswith("ENV "):
            name, _, raw = line[4:].partition("=")
            values[name] = json.loads(shlex.split(raw)[0])
    return values


def _image_layout(dockerfile: str) -> tuple[str, str]:
    added = re.search(r"^ADD \. (\S+)$", dockerfile, flags=re.M)
    workdir = re.findall(r"^WORKDIR (\S+)$", dockerfile, flags=re.M)
    assert added and workdir, dockerfile
    return added.group(1), workdir[-1]


def _resolve_in_image(spec: str, *, project_dir: str, workdir: str) -> tuple[Path, str]:
    """Map an image path (absolute, relative to WORKDIR, or a dotted module) to the repo."""
    if ".py:" in spec or "/" in spec:
        file_part, _, attr = spec.rpartition(":")
        image_path = Path(file_part) if file_part.startswith("/") else Path(workdir) / file_part
        image_path = Path(*[p for p in image_path.parts if p != "."])
        relative = image_path.relative_to(project_dir)
        return PROJECT_ROOT / relative, attr
    module, _, attr = spec.rpartition(".")
    return PROJECT_ROOT / Path(*module.split(".")).with_suffix(".py"), attr


def _has_attribute(path: Path, attr: str) -> bool:
    spec = importlib.util.spec_from_file_location(f"_image_check_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return hasattr(module, attr)


def test_dockerfile_uses_declared_python_and_distro(dockerfile: str) -> None:
    config = json.loads((PROJECT_ROOT / "langgraph.json").read_text())
    assert config["python_version"] == "3.11"
    first = dockerfile.splitlines()[0]
    # api_version pins the server: the base image names one exact server version
    # (the one installed and tested here), not a floating "3.11" tag.
    installed = importlib.metadata.version("langgraph-api")
    assert config["api_version"] == installed
    assert first == f"FROM langchain/langgraph-api:{installed}-py3.11", first
    assert "wolfi" not in first


def test_every_registered_path_resolves_in_the_image(dockerfile: str) -> None:
    project_dir, workdir = _image_layout(dockerfile)
    assert workdir == project_dir, "the server runs from the project directory"
    env = _env(dockerfile)
    config = json.loads((PROJECT_ROOT / "langgraph.json").read_text())
    expected = {"LANGSERVE_GRAPHS", "LANGGRAPH_HTTP"}
    expected |= {
        variable
        for key, variable in (
            ("auth", "LANGGRAPH_AUTH"),
            ("checkpointer", "LANGGRAPH_CHECKPOINTER"),
            ("store", "LANGGRAPH_STORE"),
        )
        if config.get(key, {}).get("path")
    }
    assert expected <= set(env), sorted(env)
    specs: list[str] = [*env["LANGSERVE_GRAPHS"].values(), env["LANGGRAPH_HTTP"]["app"]]
    specs += [
        env[v]["path"]
        for v in ("LANGGRAPH_AUTH", "LANGGRAPH_CHECKPOINTER", "LANGGRAPH_STORE")
        if v in env
    ]
    assert len(specs) >= 3
    for spec in specs:
        path, attr = _resolve_in_image(spec, project_dir=project_dir, workdir=workdir)
        assert path.is_file(), f"{spec} -> {path} does not exist in the repo"
        assert _has_attribute(path, attr), f"{spec}: {path} has no {attr!r}"


def test_image_installs_the_project_packages() -> None:
    """`pip install -e .` in the image must make every top-level package importable."""
    setuptools = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    included = setuptools["packages"]["find"]["include"]
    for package in ("graphs", "middlewares", "auth", "runtime", "sandbox", "tools", "app"):
        assert (PROJECT_ROOT / package / "__init__.py").is_file(), package
        assert f"{package}*" in included, package


def test_dockerignore_keeps_secrets_and_local_state_out() -> None:
    ignored = (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
    for entry in (".env", ".venv", ".git", ".langgraph_api", ".deer-flow"):
        assert entry in ignored, entry


# --- the image installs what was tested (issue 22 item 9) ------------------------

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)(?:\s*;[^\\]*)?\s*\\?$")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked() -> dict[str, tuple[str, int]]:
    """``name -> (version, number of hashes)`` from requirements.lock."""
    pins: dict[str, tuple[str, int]] = {}
    current: str | None = None
    for line in (PROJECT_ROOT / "requirements.lock").read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current = _normalise(match.group(1))
            pins[current] = (match.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        elif line and not line.startswith((" ", "#")):
            current = None
    return pins


def _run_lines(dockerfile: str) -> list[str]:
    return [line for line in dockerfile.splitlines() if line.startswith(("RUN ", "ADD "))]


def test_the_lock_is_installed_with_hashes_before_the_project(dockerfile: str) -> None:
    lines = _run_lines(dockerfile)
    add_lock = lines.index("ADD requirements.lock /deps/requirements.lock")
    install = next(i for i, line in enumerate(lines) if "-r /deps/requirements.lock" in line)
    project = next(i for i, line in enumerate(lines) if re.match(r"ADD \. /deps/", line))
    local_install = next(i for i, line in enumerate(lines) if "-e ." in line)
    assert add_lock < install < project < local_install, lines
    command = lines[install]
    assert "--require-hashes" in command and "--no-deps" in command, command
    # The project install resolves against constraints that now include every
    # locked pin: it keeps the locked versions or the build fails; it never drifts.
    constrained = next(i for i, line in enumerate(lines) if "/api/constraints.txt" in line)
    assert install < constrained < project, lines
    assert "cat /deps/requirements.lock >> /api/constraints.txt" in lines[constrained]
    assert "-c /api/constraints.txt" in lines[local_install], lines[local_install]


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    pins = _locked()
    assert len(pins) > 100
    unhashed = sorted(name for name, (_, hashes) in pins.items() if hashes == 0)
    assert unhashed == [], unhashed
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    for requirement in declared:
        name = _normalise(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])
        assert name in pins, f"{requirement} is not pinned in requirements.lock"
    for name in ("langgraph", "langchain", "langchain-core", "langgraph-checkpoint-postgres"):
        assert name in pins, name


def test_the_lock_reaches_the_image() -> None:
    ignored = (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
    assert not any(entry.strip() in ("requirements.lock", "*.lock") for entry in ignored)
