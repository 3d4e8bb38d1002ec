"""Where a user's thread data lives, and the virtual paths the agent sees.

Layout: ``<data root>/users/{user_id}/threads/{thread_id}/user-data/{workspace,uploads,outputs}``.
Ids must already be safe (``auth.identity.make_safe_user_id`` / ``safe_thread_id``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TOOL_RESULTS_DIRNAME",
    "VIRTUAL_OUTPUTS",
    "VIRTUAL_SKILLS",
    "VIRTUAL_UPLOADS",
    "VIRTUAL_USER_DATA",
    "VIRTUAL_WORKSPACE",
    "ThreadPaths",
    "default_data_root",
    "is_internal_output_path",
    "thread_paths",
]

VIRTUAL_USER_DATA = "/mnt/user-data"
VIRTUAL_WORKSPACE = f"{VIRTUAL_USER_DATA}/workspace"
VIRTUAL_UPLOADS = f"{VIRTUAL_USER_DATA}/uploads"
VIRTUAL_OUTPUTS = f"{VIRTUAL_USER_DATA}/outputs"
VIRTUAL_SKILLS = "/mnt/skills"
TOOL_RESULTS_DIRNAME = ".tool-results"


def is_internal_output_path(relative: str, storage_subdir: str = TOOL_RESULTS_DIRNAME) -> bool:
    """Whether an outputs-relative path is tool-output budget storage (internal).

    Internal files are never presented or downloaded and skip delivery scans.
    """
    first = relative.replace("\\", "/").lstrip("/").split("/", 1)[0]
    return first == storage_subdir.replace("\\", "/").split("/", 1)[0]


def default_data_root() -> Path:
    """Where thread data lives when neither ``data_root`` nor ``DEERFLOW_DATA_ROOT`` is set.

    ``$XDG_DATA_HOME/deerflow`` (default ``~/.local/share/deerflow``): outside the
    project tree, because ``langgraph dev`` reloads on any ``.py`` written under
    its working directory, and an agent that writes ``workspace/app.py`` there
    would restart the server and cancel its own run.
    """
    base = os.environ.get("XDG_DATA_HOME") or ""
    root = Path(base).expanduser() if base.strip() else Path.home() / ".local" / "share"
    if not root.is_absolute():  # the XDG spec ignores relative values
        root = Path.home() / ".local" / "share"
    return root / "deerflow"


@dataclass(frozen=True)
class ThreadPaths:
    """Host directories of one (user, thread). Pure: creates nothing."""

    user_id: str
    thread_id: str
    user_data: Path

    @property
    def workspace(self) -> Path:
        return self.user_data / "workspace"

    @property
    def uploads(self) -> Path:
        return self.user_data / "uploads"

    @property
    def outputs(self) -> Path:
        return self.user_data / "outputs"

    def all_dirs(self) -> tuple[Path, Path, Path]:
        return (self.workspace, self.uploads, self.outputs)


def thread_paths(data_root: Path, user_id: str, thread_id: str) -> ThreadPaths:
    for label, value in (("user_id", user_id), ("thread_id", thread_id)):
        if not value or value in {".", ".."} or "/" in value or "\\" in value or "\x00" in value:
            raise ValueError(f"unsafe {label} {value!r} for a data path")
    user_data = data_root / "users" / user_id / "threads" / thread_id / "user-data"
    return ThreadPaths(user_id=user_id, thread_id=thread_id, user_data=user_data)
