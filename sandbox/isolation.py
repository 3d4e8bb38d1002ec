"""How the local provider wraps one shell command: Linux namespaces and resource limits.

With isolation (Linux with user namespaces allowed) every command runs in its
own user, pid, mount, IPC and UTS namespaces (and a network namespace with no
interface up unless ``sandbox.network`` is true) as an unprivileged host user
(``sandbox_ids``): ``sandbox/_ns_launcher.py`` sets them up with ``unshare(2)``
and process 1 there builds a private root
with only the system directories (read-only), the thread's
``/mnt/user-data`` and ``/tmp``, and ``/mnt/skills`` (read-only), drops every
capability and applies the limits below. When the command ends (or times out)
process 1 leaves and the kernel kills every process left in the namespace.

Without it the launcher only applies the limits and runs the shell on the
host (``CommandLauncher.isolated`` is False); the provider decides whether
that is allowed (see ``sandbox.local``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["CommandLauncher", "CommandLimits", "LaunchPlan", "probe_namespaces", "sandbox_ids"]

logger = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("_ns_launcher.py")
_PROBE_TIMEOUT = 20.0


@dataclass(frozen=True)
class CommandLimits:
    """Per-command resource limits (``setrlimit``); 0 means "leave as inherited".

    ``max_processes`` counts processes of the sandbox's user (inside its own
    user namespace when isolated), so a fork bomb stops there.
    """

    max_processes: int = 256
    max_memory_bytes: int = 2 * 1024**3
    max_cpu_seconds: int = 600
    max_file_bytes: int = 1024**3
    max_open_files: int = 1024


@dataclass(frozen=True)
class LaunchPlan:
    """The argv to start and the spec to write to its stdin (read to EOF, then /dev/null)."""

    argv: list[str]
    spec: bytes


NOBODY = 65534


def sandbox_ids(uid: int | None = None) -> tuple[int, int]:
    """The host (uid, gid) that root of a sandbox's user namespace maps to.

    Never host root: a server running as root maps it to ``uid`` (default
    ``nobody``), any other server to its own user.
    """
    if os.geteuid() == 0:
        chosen = NOBODY if uid is None else uid
        return chosen, chosen
    return os.geteuid(), os.getegid()


@functools.lru_cache(maxsize=8)
def probe_namespaces(
    *, network: bool = False, uid: int | None = None
) -> tuple[str | None, Path | None]:
    """(None, mount point) if commands can be isolated here, else (reason, None). Blocking.

    Checked once per process and setting: the machine does not change, and the
    mount point (an empty directory under the temp dir) is shared by every
    command (each mounts its own root on it, in its own mount namespace).
    """
    if not sys.platform.startswith("linux"):
        return f"namespaces need Linux (this is {sys.platform})", None
    root = Path(tempfile.mkdtemp(prefix="deerflow-sandbox-root-"))
    root.chmod(0o711)  # the sandbox's unprivileged user must reach it to mount on it
    owner, group = sandbox_ids(uid)
    spec = {
        "root": str(root),
        "probe": True,
        "network": network,
        "uid": owner,
        "gid": group,
        "limits": asdict(CommandLimits()),
    }
    try:
        done = subprocess.run(
            _python_argv(),
            input=json.dumps(spec).encode(),
            env={"PATH": os.defpath},
            capture_output=True,
            timeout=_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        return f"the namespace probe failed: {exc}", None
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        detail = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
        return f"user/pid/mount namespaces are not available here ({detail[-300:]})", None
    return None, root


def _python_argv() -> list[str]:
    return [sys.executable, "-I", "-S", str(LAUNCHER)]


class CommandLauncher:
    """Builds the process that runs one command, isolated or not."""

    def __init__(
        self,
        *,
        limits: CommandLimits,
        root: Path | None,
        network: bool = False,
        uid: int | None = None,
    ) -> None:
        self.limits = limits
        self.root = root
        self.network = network
        self.uid, self.gid = sandbox_ids(uid)

    @property
    def isolated(self) -> bool:
        return self.root is not None

    def plan(
        self,
        command: str,
        *,
        env: dict[str, str],
        cwd: str,
        user_data: str | None = None,
        tmp: str | None = None,
        skills: str | None = None,
        shell: str = "/bin/bash",
    ) -> LaunchPlan:
        spec: dict[str, Any] = {
            "command": command,
            "env": env,
            "cwd": cwd,
            "shell": shell,
            "limits": asdict(self.limits),
            "isolate": self.isolated,
        }
        if self.isolated:
            spec.update(
                root=str(self.root),
                user_data=user_data,
                tmp=tmp,
                skills=skills,
                network=self.network,
                uid=self.uid,
                gid=self.gid,
            )
        return LaunchPlan(argv=_python_argv(), spec=json.dumps(spec).encode())
