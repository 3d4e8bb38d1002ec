"""Projection of the enabled skills into sandboxes, read-only, at ``/mnt/skills``.

The sandbox shows ``/mnt/skills/public/<name>/...`` and
``/mnt/skills/custom/<name>/...`` for enabled skills only (a disabled skill's
files are not there to be found and followed). The providers only call in
here:

- **Local**: the projection is materialised once per content digest under the
  data root (``<data_root>/skills-projection/<digest>/``), files ``0444``
  (``0555`` if executable) and directories ``0555``, and that directory is the
  provider's ``/mnt/skills`` root (its file tools refuse writes there).
- **Kubernetes**: no host mount. At acquire the provider copies the same tree
  into the pod (one tar over the exec channel; the pod helper's
  ``install_skills`` unpacks it with the same modes) once per pod and digest.

Everything here is blocking (file I/O); providers call it off the event loop.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.skills import SkillRegistry, get_skill_registry

__all__ = [
    "PodSkills",
    "materialize_projection",
    "pod_skills_source",
    "projection_source",
    "skills_archive",
]

PROJECTION_DIR = "skills-projection"
FILE_MODE = 0o444
EXEC_MODE = 0o555
DIR_MODE = 0o555

_lock = threading.Lock()


def _entries(registry: SkillRegistry) -> list[tuple[str, bytes, bool]]:
    """(relative path under /mnt/skills, bytes, executable) of every enabled skill file."""
    out: list[tuple[str, bytes, bool]] = []
    for skill in registry.enabled():
        for rel in sorted(skill.files):
            out.append(
                (f"{skill.source}/{skill.name}/{rel}", skill.files[rel], rel in skill.executable)
            )
    return out


def _make_writable(root: Path) -> None:
    for current, dirs, files in os.walk(root):
        os.chmod(current, 0o755)
        for name in files:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(current, name), 0o644)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(current, d))]


def _remove_tree(root: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        _make_writable(root)
        shutil.rmtree(root)


def materialize_projection(registry: SkillRegistry, data_root: Path) -> Path:
    """The host directory to show at ``/mnt/skills``; built once per digest (atomic rename)."""
    base = data_root / PROJECTION_DIR
    target = base / registry.digest()
    if target.is_dir():
        return target
    with _lock:
        if target.is_dir():
            return target
        base.mkdir(parents=True, exist_ok=True)
        staging = base / f".{target.name}.{uuid.uuid4().hex}.tmp"
        try:
            for sub in ("public", "custom"):
                (staging / sub).mkdir(parents=True)
            for rel, data, executable in _entries(registry):
                path = staging / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                os.chmod(path, EXEC_MODE if executable else FILE_MODE)
            for current, _dirs, _files in os.walk(staging, topdown=False):
                os.chmod(current, DIR_MODE)
            try:
                os.rename(staging, target)
            except OSError:
                if not target.is_dir():  # not a lost race with another replica
                    raise
        finally:
            if staging.exists():
                _remove_tree(staging)
    return target


def projection_source(settings: Any) -> Callable[[], Path | None]:
    """For the local provider: a blocking callable that returns the projection root.

    A registry that cannot be read projects nothing (``None``: no ``/mnt/skills``),
    which is the closed direction.
    """
    data_root = settings.data_root_path()

    def source() -> Path | None:
        try:
            registry = get_skill_registry(settings)
        except Exception:
            return None
        return materialize_projection(registry, data_root)

    return source


def skills_archive(registry: SkillRegistry) -> bytes:
    """An uncompressed tar of the projection, with the modes the pod gets."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        seen_dirs: set[str] = set()

        def add_dir(name: str) -> None:
            if name in seen_dirs or not name:
                return
            parent = name.rsplit("/", 1)[0] if "/" in name else ""
            add_dir(parent)
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = DIR_MODE
            tar.addfile(info)
            seen_dirs.add(name)

        add_dir("public")
        add_dir("custom")
        for rel, data, executable in _entries(registry):
            add_dir(rel.rsplit("/", 1)[0])
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = EXEC_MODE if executable else FILE_MODE
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass(frozen=True)
class PodSkills:
    """What the Kubernetes provider copies into a pod: the digest and the tar."""

    digest: str
    archive: bytes


def pod_skills_source(settings: Any) -> Callable[[], PodSkills | None]:
    """For the Kubernetes provider: a blocking callable returning the payload (cached)."""
    cache: dict[str, PodSkills] = {}

    def source() -> PodSkills | None:
        try:
            registry = get_skill_registry(settings)
        except Exception:
            return None
        digest = registry.digest()
        found = cache.get(digest)
        if found is None:
            found = PodSkills(digest=digest, archive=skills_archive(registry))
            cache.clear()
            cache[digest] = found
        return found

    return source
