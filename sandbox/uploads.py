"""The thread uploads directory on the host: listing, names and sizes.

Shared by the HTTP upload route (which writes files here) and
UploadsMiddleware (which tells the model about them). The host thread
directory is the canonical store for uploads whatever the sandbox provider;
a provider with separate storage copies them in when it needs them.
"""

from __future__ import annotations

import math
import os
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.paths import VIRTUAL_UPLOADS, ThreadPaths
from sandbox import _hostfs
from sandbox.base import SandboxError

__all__ = [
    "TEMP_PREFIX",
    "UploadEntry",
    "format_size",
    "list_uploads",
    "read_upload_head",
    "sanitize_filename",
    "uploads_root",
    "valid_basename",
]

# In-progress uploads are written under this prefix and renamed when complete.
TEMP_PREFIX = ".upload-"
_MAX_NAME_BYTES = 200
_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")
_TB = 1024**4
# Sizes at or past this would need a unit we do not have: shown as 0.
_DISPLAY_LIMIT = 1024 ** len(_UNITS)


@dataclass(frozen=True)
class UploadEntry:
    filename: str
    size: int
    modified: float

    @property
    def virtual_path(self) -> str:
        return f"{VIRTUAL_UPLOADS}/{self.filename}"


def uploads_root(data_root: Path, paths: ThreadPaths) -> _hostfs.HostRoot:
    return _hostfs.HostRoot(VIRTUAL_UPLOADS, data_root, paths.uploads.relative_to(data_root).parts)


def valid_basename(name: Any) -> bool:
    """An exact basename: a non-empty string naming one entry, nothing else."""
    return (
        isinstance(name, str)
        and name not in {"", ".", ".."}
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
        and len(name.encode("utf-8", errors="surrogatepass")) <= 255
    )


def sanitize_filename(raw: Any) -> str | None:
    """A safe basename for an uploaded file, or None when nothing usable is left.

    Keeps the last path component (clients send ``C:\\dir\\a.txt`` too), drops
    control characters, trims dots and spaces at the ends (no hidden or
    relative names) and bounds the length while keeping the extension.
    """
    if not isinstance(raw, str):
        return None
    name = raw.replace("\\", "/").rsplit("/", 1)[-1]
    name = unicodedata.normalize("NFC", name)
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C" and ch not in '<>:"|?*')
    name = name.strip().strip(".").strip()
    if not name or name.startswith(TEMP_PREFIX):
        return None
    while len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        stem, dot, ext = name.rpartition(".")
        if dot and stem and len(ext) <= 16:
            name = f"{stem[:-1]}.{ext}" if len(stem) > 1 else name[:-1]
        else:
            name = name[:-1]
    return name if valid_basename(name) else None


def format_size(value: Any) -> str:
    """Human-readable size; invalid or display-overflowing values show as ``0 B``.

    Sizes from 1 TB up are rendered compactly (no decimals past one, the
    largest unit) and the stored value is never changed: this is display only.
    """
    if isinstance(value, bool):
        size = 0
    elif isinstance(value, int):
        size = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        size = int(value)
    else:
        size = 0
    if size < 0 or size >= _DISPLAY_LIMIT:
        size = 0
    if size < 1024:
        return f"{size} B"
    amount = float(size)
    unit = 0
    while amount >= 1024 and unit < len(_UNITS) - 1:
        amount /= 1024
        unit += 1
    if size >= _TB:
        text = f"{amount:.1f}".rstrip("0").rstrip(".")
        return f"{text} {_UNITS[unit]}"
    return f"{amount:.1f} {_UNITS[unit]}"


def list_uploads(root: _hostfs.HostRoot) -> list[UploadEntry]:
    """Regular files directly in the uploads directory (blocking; links skipped)."""
    try:
        fd = _hostfs.open_dir(root, ())
    except SandboxError:
        return []
    entries: list[UploadEntry] = []
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                if entry.name.startswith(TEMP_PREFIX) or not valid_basename(entry.name):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    entries.append(UploadEntry(entry.name, info.st_size, info.st_mtime))
    finally:
        os.close(fd)
    entries.sort(key=lambda e: e.filename)
    return entries


def read_upload_head(root: _hostfs.HostRoot, filename: str, limit: int = 16384) -> bytes:
    """The first ``limit`` bytes of an upload (blocking; links refused)."""
    return _hostfs.read_head(root, (filename,), limit)
