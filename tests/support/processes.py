"""Find this machine's processes by command line (tests of process hygiene).

Pids inside a sandbox's pid namespace mean nothing on the host, so tests mark
the processes they start with a unique argument (``sleep 301.25``) and look
for it in every ``/proc/<pid>/cmdline`` here.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

__all__ = ["host_processes", "wait_gone"]


def host_processes(needle: str, *, running: bool = False) -> list[int]:
    """Live (not zombie) host pids whose command line contains ``needle``.

    ``running``: only those on a CPU or waiting for one (state ``R``).
    """
    found = []
    wanted = needle.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if wanted in cmdline and state not in {"Z", "X"} and (state == "R" or not running):
            found.append(int(entry.name))
    return found


async def wait_gone(needle: str, *, seconds: float = 5.0) -> None:
    """Fail unless no process matching ``needle`` is left within ``seconds``."""
    for _ in range(int(seconds / 0.05)):
        if not await asyncio.to_thread(host_processes, needle):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"processes matching {needle!r} outlived their command")
