"""Virtual path validation and the command/output rewriting heuristics."""

from __future__ import annotations

import pytest

from sandbox.base import SandboxPathError
from sandbox.paths import (
    VirtualPath,
    host_to_virtual,
    parse_virtual_path,
    virtual_to_host_in_command,
)

WS = "/mnt/user-data/workspace"


@pytest.mark.parametrize(
    ("raw", "root", "parts"),
    [
        ("notes.txt", WS, ("notes.txt",)),
        ("./a/./b//c.txt", WS, ("a", "b", "c.txt")),
        (f"{WS}", WS, ()),
        (f"{WS}/", WS, ()),
        ("/mnt/user-data/uploads/x.pdf", "/mnt/user-data/uploads", ("x.pdf",)),
        ("/mnt/user-data/outputs/r/s.md", "/mnt/user-data/outputs", ("r", "s.md")),
        ("/mnt/skills/web/SKILL.md", "/mnt/skills", ("web", "SKILL.md")),
        ("/mnt/user-data", "/mnt/user-data", ()),
        ("  spaced.txt  ", WS, ("spaced.txt",)),
        ("file..name", WS, ("file..name",)),
    ],
)
def test_valid_paths(raw: str, root: str, parts: tuple[str, ...]) -> None:
    parsed = parse_virtual_path(raw)
    assert parsed == VirtualPath(root=root, parts=parts)
    assert parsed.virtual == "/".join((root, *parts)) if parts else root


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("../x", "'..' is not allowed"),
        (f"{WS}/a/../b", "'..' is not allowed"),
        ("/etc/passwd", "outside the sandbox"),
        ("/home/user/.ssh/id_rsa", "outside the sandbox"),
        ("/mnt/user-data/other", "outside the sandbox"),
        ("/mnt/user-dataX/a", "outside the sandbox"),
        ("/mnt/skill/x", "outside the sandbox"),
        ("~/x", "'~' is not expanded"),
        ("", "empty"),
        ("   ", "empty"),
        ("a\x00b", "NUL"),
        ("x" * 5000, "longer than"),
        ("a/" + "b" * 256, "longer than 255"),
    ],
)
def test_refused_paths(raw: str, message: str) -> None:
    with pytest.raises(SandboxPathError, match=message):
        parse_virtual_path(raw)


def test_non_strings_are_refused() -> None:
    for value in (None, 12, ["a"], b"/mnt/user-data/workspace"):
        with pytest.raises(SandboxPathError, match="must be a string"):
            parse_virtual_path(value)


def test_writability() -> None:
    assert parse_virtual_path("a.txt").writable
    assert parse_virtual_path("/mnt/user-data/outputs/a").writable
    assert not parse_virtual_path("/mnt/skills/a").writable
    assert not parse_virtual_path("/mnt/user-data").writable


def test_command_rewriting_respects_path_boundaries() -> None:
    mapping = {"/mnt/user-data": "/data/u1/t1/user-data", "/mnt/skills": "/srv/skills"}
    rewrite = virtual_to_host_in_command
    assert rewrite("cat /mnt/user-data/workspace/a.txt", mapping) == (
        "cat /data/u1/t1/user-data/workspace/a.txt"
    )
    assert rewrite('cp "/mnt/skills/x" --to=/mnt/user-data/outputs', mapping) == (
        'cp "/srv/skills/x" --to=/data/u1/t1/user-data/outputs'
    )
    assert rewrite("ls /mnt/user-data;ls /mnt/user-data|wc", mapping) == (
        "ls /data/u1/t1/user-data;ls /data/u1/t1/user-data|wc"
    )
    # Not paths of ours: a longer name, a relative prefix, another root.
    for untouched in (
        "ls /mnt/user-data-backup",
        "ls foo/mnt/user-data/x",
        "ls /mnt/skillset",
        "echo mnt/user-data",
    ):
        assert rewrite(untouched, mapping) == untouched


def test_output_rewriting() -> None:
    mapping = {
        "/data/u1/t1/user-data": "/mnt/user-data",
        "/real/data/u1/t1/user-data": "/mnt/user-data",
    }
    text = "/data/u1/t1/user-data/workspace\ncd '/real/data/u1/t1/user-data/outputs'\n/data/u1/t1/user-data2"
    assert host_to_virtual(text, mapping) == (
        "/mnt/user-data/workspace\ncd '/mnt/user-data/outputs'\n/data/u1/t1/user-data2"
    )
    assert host_to_virtual("", mapping) == ""
    assert host_to_virtual("x", {}) == "x"
