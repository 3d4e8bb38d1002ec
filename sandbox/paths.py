"""Virtual path validation and translation, shared by every provider.

The agent only ever sees virtual paths. This module decides, lexically and
without touching any filesystem, whether a path is inside one of the virtual
roots, and splits it into (root, components) that a provider maps onto its
storage. It refuses rather than repairs: ``..`` anywhere, NUL bytes, and any
absolute path outside the roots (host paths included) are errors, so a
provider never has to reason about escapes after this point. Symbolic links
are a property of storage, not of the path text: providers refuse them while
walking (the local provider opens every component with ``O_NOFOLLOW``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.paths import (
    VIRTUAL_OUTPUTS,
    VIRTUAL_SKILLS,
    VIRTUAL_UPLOADS,
    VIRTUAL_USER_DATA,
    VIRTUAL_WORKSPACE,
)
from sandbox.base import SandboxPathError

__all__ = [
    "MAX_PATH_LENGTH",
    "READ_ONLY_ROOTS",
    "VIRTUAL_ROOTS",
    "VirtualPath",
    "host_to_virtual",
    "parse_virtual_path",
    "virtual_to_host_in_command",
]

MAX_PATH_LENGTH = 4096
_MAX_COMPONENT = 255

# Longest first: the first root that prefixes a path wins.
VIRTUAL_ROOTS: tuple[str, ...] = (
    VIRTUAL_WORKSPACE,
    VIRTUAL_UPLOADS,
    VIRTUAL_OUTPUTS,
    VIRTUAL_SKILLS,
    VIRTUAL_USER_DATA,
)
# File tools may read but never write below these.
READ_ONLY_ROOTS: frozenset[str] = frozenset({VIRTUAL_SKILLS, VIRTUAL_USER_DATA})

_ALLOWED = "/mnt/user-data/workspace, /mnt/user-data/uploads, /mnt/user-data/outputs or /mnt/skills"


@dataclass(frozen=True)
class VirtualPath:
    """A validated virtual path: ``root`` plus the components below it."""

    root: str
    parts: tuple[str, ...]

    @property
    def virtual(self) -> str:
        return "/".join((self.root, *self.parts)) if self.parts else self.root

    @property
    def writable(self) -> bool:
        return self.root not in READ_ONLY_ROOTS

    def __str__(self) -> str:
        return self.virtual


def parse_virtual_path(path: object, *, cwd: str = VIRTUAL_WORKSPACE) -> VirtualPath:
    """Validate ``path`` and split it into a virtual root and components.

    Relative paths are relative to ``cwd`` (the workspace). ``.`` components
    and repeated slashes are dropped; ``..`` is refused outright.
    """
    if not isinstance(path, str):
        raise SandboxPathError(f"path must be a string, got {type(path).__name__}")
    text = path.strip()
    if not text:
        raise SandboxPathError("path is empty")
    if "\x00" in text:
        raise SandboxPathError("path contains a NUL byte")
    if len(text) > MAX_PATH_LENGTH:
        raise SandboxPathError(f"path is longer than {MAX_PATH_LENGTH} characters")
    if text == "~" or text.startswith("~/"):
        raise SandboxPathError(f"{path!r}: '~' is not expanded; use a path under {_ALLOWED}")
    if not text.startswith("/"):
        text = f"{cwd}/{text}"
    parts = [piece for piece in text.split("/") if piece not in {"", "."}]
    if ".." in parts:
        raise SandboxPathError(f"{path!r}: '..' is not allowed in sandbox paths")
    for piece in parts:
        if len(piece) > _MAX_COMPONENT:
            raise SandboxPathError(f"{path!r}: a path component is longer than 255 bytes")
    for root in VIRTUAL_ROOTS:
        root_parts = root.strip("/").split("/")
        if parts[: len(root_parts)] == root_parts:
            rest = tuple(parts[len(root_parts) :])
            if root == VIRTUAL_USER_DATA and rest:
                # Only the three directories live under /mnt/user-data.
                break
            return VirtualPath(root=root, parts=rest)
    raise SandboxPathError(f"{path!r} is outside the sandbox; use a path under {_ALLOWED}")


def _boundary_pattern(prefixes: list[str]) -> re.Pattern[str]:
    # A path starts after the start of text or a character that cannot be part
    # of a path, and ends at a slash, the end, or such a character.
    ordered = sorted({p for p in prefixes if p}, key=len, reverse=True)
    alternatives = "|".join(re.escape(p) for p in ordered)
    return re.compile(rf"(?<![\w.\-/~])(?:{alternatives})(?=/|$|[^\w.\-])")


def virtual_to_host_in_command(command: str, mapping: Mapping[str, str]) -> str:
    """Rewrite virtual roots inside a shell command to the provider's host paths.

    A heuristic on text (the same one DeerFlow's local sandbox uses): it
    rewrites ``/mnt/user-data/...`` wherever it appears as a path, including
    inside quotes. It is a convenience, not a boundary: the local provider is
    not an isolation boundary either way.
    """
    if not command or not mapping:
        return command
    pattern = _boundary_pattern(list(mapping))
    return pattern.sub(lambda m: mapping[m.group(0)], command)


def host_to_virtual(text: str, mapping: Mapping[str, str]) -> str:
    """Rewrite host paths in output back to virtual ones (``mapping``: host -> virtual)."""
    if not text or not mapping:
        return text
    pattern = _boundary_pattern(list(mapping))
    return pattern.sub(lambda m: mapping[m.group(0)], text)
