"""``present_files``: show files from the outputs directory to the user.

Presented paths go into state ``artifacts`` (a union reducer), which is what
the HTTP app's download route serves, and nothing else. Only regular files
under ``/mnt/user-data/outputs`` can be presented. On a provider whose
storage is not the host thread directory, the file is copied to the host
outputs directory here so the HTTP app can serve it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.tools import tool
from langgraph.types import Command

from runtime.paths import VIRTUAL_OUTPUTS, is_internal_output_path, thread_paths
from sandbox import hostfs as _hostfs
from sandbox.base import SandboxError
from sandbox.paths import parse_virtual_path
from sandbox.session import SandboxBinding
from tools._common import ToolOutcome, mark_sandbox_tool, run_sandbox_tool

__all__ = ["MAX_PRESENTED_PER_CALL", "present_files"]

MAX_PRESENTED_PER_CALL = 50


async def _copy_to_host(binding: SandboxBinding, parts: tuple[str, ...], virtual: str) -> None:
    data = await binding.sandbox.download_bytes(virtual)
    paths = thread_paths(binding.settings.data_root_path(), binding.user_id, binding.thread_id)
    root = _hostfs.HostRoot(
        VIRTUAL_OUTPUTS,
        binding.settings.data_root_path(),
        paths.outputs.relative_to(binding.settings.data_root_path()).parts,
    )
    await asyncio.to_thread(_hostfs.write_bytes, root, parts, data, append=False)


@tool("present_files", parse_docstring=True)
async def _present_files(
    filepaths: list[str], runtime: ToolRuntime[Any, Any]
) -> str | Command[Any]:
    """Present finished files to the user so they can open or download them.

    Only files inside /mnt/user-data/outputs can be presented; write or copy
    deliverables there first.

    Args:
        filepaths: Paths of the files to present, e.g. ["/mnt/user-data/outputs/report.md"].
    """

    async def operation(binding: SandboxBinding) -> ToolOutcome:
        if not filepaths:
            raise SandboxError("filepaths is empty; list the files to present")
        if len(filepaths) > MAX_PRESENTED_PER_CALL:
            raise SandboxError(f"present at most {MAX_PRESENTED_PER_CALL} files per call")
        presented: list[str] = []
        refused: list[str] = []
        for raw in filepaths:
            try:
                virtual = parse_virtual_path(raw)
            except SandboxError as exc:
                refused.append(f"{raw}: {exc}")
                continue
            if virtual.root != VIRTUAL_OUTPUTS or not virtual.parts:
                refused.append(f"{raw}: only files in {VIRTUAL_OUTPUTS} can be presented")
                continue
            if is_internal_output_path(
                "/".join(virtual.parts), binding.settings.tool_output.storage_subdir
            ):
                refused.append(f"{raw}: internal tool-output storage cannot be presented")
                continue
            if not await binding.sandbox.is_file(virtual.virtual):
                refused.append(f"{raw}: not an existing regular file")
                continue
            if not binding.sandbox.shares_host_user_data:
                await _copy_to_host(binding, virtual.parts, virtual.virtual)
            if virtual.virtual not in presented:
                presented.append(virtual.virtual)
        lines = []
        if presented:
            lines.append("Presented to the user:")
            lines.extend(f"- {path}" for path in presented)
        if refused:
            lines.append("Not presented:")
            lines.extend(f"- {reason}" for reason in refused)
        return ToolOutcome(
            "\n".join(lines),
            update={"artifacts": presented} if presented else {},
            status="success" if presented else "error",
        )

    return await run_sandbox_tool("present_files", runtime, operation)


present_files = mark_sandbox_tool(_present_files)
