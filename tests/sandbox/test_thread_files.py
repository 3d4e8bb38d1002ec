"""The thread file store's start-up check and per-thread removal (no server)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from runtime.config import ConfigError, Settings
from sandbox.thread_files import check_file_store, delete_thread_files, thread_dir


def _settings(root: Path, backend: str = "shared") -> Settings:
    return Settings.model_validate({"data_root": str(root), "files": {"backend": backend}})


def test_shared_store_needs_an_absolute_mounted_writable_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="absolute data_root"):
        Settings.model_validate({"data_root": "relative/dir", "files": {"backend": "shared"}})
    with pytest.raises(ConfigError, match="does not exist"):
        check_file_store(_settings(tmp_path / "not-mounted"))
    check_file_store(_settings(tmp_path))  # writable: fine, and leaves nothing behind
    assert list(tmp_path.iterdir()) == []
    check_file_store(_settings(tmp_path / "not-mounted", backend="local"))  # local: no check


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_shared_store_refuses_a_read_only_root(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="not writable"):
            check_file_store(_settings(tmp_path))
    finally:
        tmp_path.chmod(0o700)


async def test_delete_thread_files_removes_only_that_thread(tmp_path: Path) -> None:
    settings = _settings(tmp_path, backend="local")
    gone = thread_dir(settings, "alice", "t1")
    kept = thread_dir(settings, "alice", "t2")
    outside = tmp_path / "outside.txt"

    def lay_out() -> None:  # blocking file work off the loop (the server's detector watches it)
        outside.write_text("keep")
        for folder in (gone, kept):
            (folder / "user-data" / "uploads").mkdir(parents=True)
            (folder / "user-data" / "uploads" / "a.txt").write_text("a")
        (gone / "user-data" / "workspace").mkdir()
        (gone / "user-data" / "workspace" / "link").symlink_to(outside)

    def survivors() -> tuple[bool, str, str]:
        return (
            gone.exists(),
            (kept / "user-data" / "uploads" / "a.txt").read_text(),
            outside.read_text(),
        )

    await asyncio.to_thread(lay_out)
    assert await delete_thread_files(settings, "alice", "t1") is True
    # the link inside the tree is removed, not followed
    assert await asyncio.to_thread(survivors) == (False, "a", "keep")
    assert await delete_thread_files(settings, "alice", "t1") is False
    with pytest.raises(ValueError, match="unsafe"):
        await delete_thread_files(settings, "alice", "..")
