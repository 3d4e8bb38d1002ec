"""The thread file store: where every replica finds a thread's files, and their removal.

A thread's files (uploads, presented outputs, the workspace, externalised tool
results) live under ``runtime.paths.thread_paths(data_root, user, thread)``.
``files.backend`` says what that data root is:

- ``local`` (default): a directory on this machine. Right for ``make dev`` and
  one process; with several replicas each would see only its own uploads.
- ``shared``: a directory every API replica and queue worker mounts (a
  ReadWriteMany volume, see ``deploy/``). ``check_file_store`` refuses to start
  when it is missing or read-only, so files never land on one pod's disk.

Deleting a thread deletes its files: ``delete_thread_files`` is called when
the API answered a thread deletion with success (``app.thread_cleanup``), and
also asks the sandbox provider to drop its own per-thread resources (the
Kubernetes pod and workspace volume).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from pathlib import Path

from runtime.config import ConfigError, Settings
from runtime.paths import thread_paths
from sandbox.provider import get_sandbox_provider

__all__ = ["check_file_store", "delete_thread_files", "thread_dir"]

logger = logging.getLogger(__name__)


def thread_dir(settings: Settings, user_id: str, thread_id: str) -> Path:
    """The directory holding everything of one (user, thread) under the data root."""
    return thread_paths(settings.data_root_path(), user_id, thread_id).user_data.parent


def check_file_store(settings: Settings) -> None:
    """Fail clearly when the configured store cannot hold files (blocking: run off-loop).

    ``shared``: the data root must exist already (the volume is mounted; the
    server never creates a mount point) and accept a write, fsync and read.
    """
    if settings.files.backend != "shared":
        return
    root = settings.data_root_path()
    if not root.is_dir():
        raise ConfigError(
            f"files.backend is 'shared' but the data root {root} does not exist; mount the "
            "shared volume there (deploy/k8s: the thread-files PersistentVolumeClaim)"
        )
    probe = root / f".deerflow-probe-{uuid.uuid4().hex}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
        if probe.read_bytes() != b"ok":
            raise OSError("the probe file read back differently")
    except OSError as exc:
        raise ConfigError(f"the shared file store {root} is not writable: {exc}") from exc
    finally:
        probe.unlink(missing_ok=True)


async def delete_thread_files(settings: Settings, user_id: str, thread_id: str) -> bool:
    """Remove the thread's files and the provider's per-thread resources.

    Returns whether a directory was removed. Errors are logged, not raised:
    the thread itself is already gone.
    """
    target = thread_dir(settings, user_id, thread_id)
    removed = await asyncio.to_thread(_remove_tree, target)
    try:
        provider = get_sandbox_provider(settings)
        await provider.delete_thread(thread_id, user_id=user_id)
    except Exception as exc:  # the thread is gone either way; the reaper cleans up
        logger.warning("could not delete the sandbox of deleted thread %s: %s", thread_id, exc)
    return removed


def _remove_tree(target: Path) -> bool:
    if not target.is_dir() or target.is_symlink():
        return False
    # rmtree never follows symbolic links inside the tree (fd-based on Linux).
    shutil.rmtree(target, ignore_errors=True)
    return not target.exists()
