"""The in-pod helper on its own: stdin framing, bootstrap, globbing, refusals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sandbox import _pod_agent
from sandbox.kubernetes import _BOOTSTRAP, _parse_result


def _run(
    request: dict[str, object], payload: bytes = b"", *, truncate: int = 0
) -> tuple[int, bytes, dict[str, object] | None]:
    code = _pod_agent.bundle()
    encoded = json.dumps(request).encode()
    data = code + encoded + payload
    if truncate:
        data = data[:-truncate]
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(len(code)), str(len(encoded))],
        input=data,
        capture_output=True,
        check=False,
        timeout=30,
    )
    return done.returncode, done.stdout, _parse_result(done.stderr)


def test_bootstrap_reads_program_and_request_from_stdin() -> None:
    code, out, result = _run({"op": "list", "path": "/etc"})
    assert code == 1 and out == b""
    assert result == {"ok": False, "kind": "path", "message": "'/etc' is outside the sandbox"}


@pytest.mark.parametrize(
    ("request_", "kind"),
    [
        ({"op": "read", "path": "relative"}, "path"),
        ({"op": "read", "path": "/mnt/user-data/../etc/passwd"}, "path"),
        ({"op": "read", "path": "/mnt/user-data/elsewhere"}, "path"),
        ({"op": "glob", "path": "/mnt/user-data/workspace", "pattern": "../*"}, "path"),
        ({"op": "nope"}, "protocol"),
    ],
)
def test_refusals(request_: dict[str, object], kind: str) -> None:
    _code, _out, result = _run(request_)
    assert result is not None and result["kind"] == kind


def test_write_to_read_only_root_drains_its_payload() -> None:
    code, _out, result = _run({"op": "write", "path": "/mnt/skills/x", "size": 3}, b"abc")
    assert code == 1 and result is not None and result["kind"] == "read_only"


def test_a_short_request_fails_cleanly() -> None:
    code, _out, result = _run({"op": "list", "path": "/mnt/user-data"}, truncate=5)
    assert code == 2 and result is not None and result["kind"] == "protocol"


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("*.py", ["a.py"], ["d/a.py", "a.pyc"]),
        ("**/*.py", ["a.py", "d/a.py", "d/e/a.py"], ["a.txt"]),
        ("d/**", ["d/a", "d/e/f"], ["x/d/a"]),
        ("file?.[ch]", ["file1.c", "filex.h"], ["file10.c", "file1.o"]),
        ("[!a]*", ["b", "cat"], ["apple"]),
        ("a+b(c).txt", ["a+b(c).txt"], ["aab(c).txt"]),
    ],
)
def test_glob_patterns(pattern: str, matches: list[str], misses: list[str]) -> None:
    regex = _pod_agent.glob_regex(pattern)
    for path in matches:
        assert regex.match(path), path
    for path in misses:
        assert not regex.match(path), path
