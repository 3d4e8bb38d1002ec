"""UploadsMiddleware (spec number 6, lead agent only): tell the model about uploads.

Once per run it puts an ``<uploaded_files>`` block in front of the latest user
message: the files attached to this message (``additional_kwargs.files``
references, matched by exact basename in the run owner's uploads directory)
and the files uploaded earlier in the thread, each with its size, virtual
path and a short outline. The files stay on disk; the model reads them with
its tools. The same facts go to ``additional_kwargs.uploaded_files`` for
clients. A referenced file that is not in the thread's file store is listed
as missing (status ``missing``), so the model can tell the user instead of
answering without it: with several replicas a silently dropped upload is a
wrong answer. Malformed references and files that cannot be probed are
skipped (debug-logged), never raised on. Sizes that are invalid or too large to
display show as 0, from 1 TB up compactly; stored sizes are never changed.

The message is replaced by a copy with the same id (the reducer swaps it in
place) that keeps every field, ``response_metadata`` included. The original
text goes to ``additional_kwargs.original_user_content`` unless a valid
string is already there (first writer wins). The block itself is recorded as
server-written (``deerflow_server_block``: content kind ``uploaded_files``,
producer ``uploads``, its exact text), so InputSanitization leaves it intact
and only neutralises the user's own text after it.
"""

from __future__ import annotations

import asyncio
import html
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.runtime import Runtime

from auth.identity import resolve_runtime_user_id
from middlewares._text import content_text
from middlewares.input_sanitization import server_block_kwargs
from middlewares.thread_data import latest_user_message_index
from runtime.config import Settings
from runtime.paths import thread_paths
from runtime.state import ThreadState
from sandbox.base import SandboxError
from sandbox.session import safe_thread_id, thread_id_of
from sandbox.uploads import (
    UploadEntry,
    format_size,
    list_uploads,
    read_upload_head,
    uploads_root,
    valid_basename,
)

__all__ = ["UPLOADED_FILES_TAG", "UploadsMiddleware", "outline_of"]

logger = logging.getLogger(__name__)

UPLOADED_FILES_TAG = "uploaded_files"
_OPEN = f"<{UPLOADED_FILES_TAG}>"
_CLOSE = f"</{UPLOADED_FILES_TAG}>"
_OUTLINE_CHARS = 200


@dataclass(frozen=True)
class _Listed:
    entry: UploadEntry
    current: bool
    outline: str | None


def outline_of(filename: str, head: bytes) -> str | None:
    """A one-line hint of what a file holds, from its first bytes (text only)."""
    if not head or b"\x00" in head[:8192]:
        return None
    text = head.decode("utf-8", errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    lower = filename.lower()
    if lower.endswith((".md", ".markdown")):
        headings = [line for line in lines if line.startswith("#")][:6]
        outline = "; ".join(headings) if headings else lines[0]
    elif lower.endswith((".csv", ".tsv")):
        outline = f"columns: {lines[0]}"
    else:
        outline = " / ".join(line[:100] for line in lines[:2])
    if len(outline) > _OUTLINE_CHARS:
        outline = outline[: _OUTLINE_CHARS - 1] + "…"
    return outline


def _text_of(content: Any) -> str:
    return content_text(content, "\n")


def _already_injected(message: HumanMessage) -> bool:
    return isinstance(message.additional_kwargs.get(UPLOADED_FILES_TAG), list) and _text_of(
        message.content
    ).startswith(_OPEN)


def _current_names(references: Any) -> list[str]:
    """Exact basenames referenced by the message; malformed entries skipped."""
    if references is None:
        return []
    if not isinstance(references, list):
        logger.debug("uploads: additional_kwargs.files is not a list; ignored")
        return []
    names: list[str] = []
    for index, reference in enumerate(references):
        name = reference.get("filename") if isinstance(reference, dict) else None
        if not isinstance(name, str) or not valid_basename(name):
            logger.debug("uploads: skipping malformed file reference #%d", index)
            continue
        if name not in names:
            names.append(name)
    return names


class UploadsMiddleware(AgentMiddleware[ThreadState, Any]):
    """Surfaces the thread's uploads to the model in front of the latest user message."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    state_schema = ThreadState

    def __init__(self, settings: Settings, *, max_listed: int = 50) -> None:
        super().__init__()
        self._settings = settings
        self.max_listed = max_listed

    def _scan(
        self, user_id: str, thread_id: str, names: list[str]
    ) -> tuple[list[_Listed], int, list[str]]:
        """Blocking: probe the uploads directory. Returns (listed, omitted count, missing)."""
        data_root = self._settings.data_root_path()
        root = uploads_root(data_root, thread_paths(data_root, user_id, thread_id))
        on_disk = {entry.filename: entry for entry in list_uploads(root)}
        current: list[UploadEntry] = []
        missing: list[str] = []
        for name in names:
            entry = on_disk.get(name)
            if entry is None:
                logger.warning("uploads: referenced file %r is not in the uploads directory", name)
                missing.append(name)
                continue
            current.append(entry)
        current_names = {entry.filename for entry in current}
        earlier = sorted(
            (e for e in on_disk.values() if e.filename not in current_names),
            key=lambda e: (-e.modified, e.filename),
        )
        chosen = [(e, True) for e in current] + [(e, False) for e in earlier]
        omitted = max(0, len(chosen) - self.max_listed)
        listed: list[_Listed] = []
        for entry, is_current in chosen[: self.max_listed]:
            try:
                outline = outline_of(entry.filename, read_upload_head(root, entry.filename))
            except (SandboxError, OSError) as exc:
                logger.debug("uploads: cannot probe %r: %s", entry.filename, exc)
                if is_current:
                    continue
                outline = None
            listed.append(_Listed(entry, is_current, outline))
        return listed, omitted, missing

    def _plan(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> tuple[int, str, str, list[str]] | None:
        messages: Sequence[AnyMessage] = state.get("messages") or []
        index = latest_user_message_index(messages)
        if index is None:
            return None
        message = messages[index]
        if not isinstance(message, HumanMessage) or not message.id or _already_injected(message):
            return None
        raw_thread = thread_id_of(runtime)
        if not raw_thread:
            return None
        names = _current_names(message.additional_kwargs.get("files"))
        return index, resolve_runtime_user_id(runtime), safe_thread_id(raw_thread), names

    def _apply(
        self, message: HumanMessage, listed: list[_Listed], omitted: int, missing: list[str]
    ) -> dict[str, Any] | None:
        if not listed and not missing:
            return None
        block = _render(listed, omitted, missing)
        kwargs = dict(message.additional_kwargs)
        if not isinstance(kwargs.get("original_user_content"), str):
            kwargs["original_user_content"] = _text_of(message.content)
        kwargs[UPLOADED_FILES_TAG] = [
            {
                "filename": item.entry.filename,
                "size": item.entry.size,
                "path": item.entry.virtual_path,
                "status": "current" if item.current else "earlier",
            }
            for item in listed
        ] + [{"filename": name, "status": "missing"} for name in missing]
        kwargs.update(
            server_block_kwargs(block, content_kind=UPLOADED_FILES_TAG, producer_kind="uploads")
        )
        content: Any = message.content
        if isinstance(content, list):
            new_content: Any = [{"type": "text", "text": block}, *content]
        else:
            new_content = f"{block}\n\n{content}" if content else block
        updated = message.model_copy(update={"content": new_content, "additional_kwargs": kwargs})
        return {"messages": [updated]}

    def before_agent(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        plan = self._plan(state, runtime)
        if plan is None:
            return None
        index, user_id, thread_id, names = plan
        listed, omitted, missing = self._scan(user_id, thread_id, names)
        return self._apply(state["messages"][index], listed, omitted, missing)  # type: ignore[arg-type]

    async def abefore_agent(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        plan = self._plan(state, runtime)
        if plan is None:
            return None
        index, user_id, thread_id, names = plan
        listed, omitted, missing = await asyncio.to_thread(self._scan, user_id, thread_id, names)
        return self._apply(state["messages"][index], listed, omitted, missing)  # type: ignore[arg-type]


def _line(item: _Listed) -> list[str]:
    name = html.escape(item.entry.filename, quote=False)
    path = html.escape(item.entry.virtual_path, quote=False)
    lines = [f"- {name} ({format_size(item.entry.size)}) at {path}"]
    if item.outline:
        lines.append(f"  Outline: {html.escape(item.outline, quote=False)}")
    return lines


def _render(listed: list[_Listed], omitted: int, missing: Sequence[str] = ()) -> str:
    current = [item for item in listed if item.current]
    earlier = [item for item in listed if not item.current]
    lines = [_OPEN]
    if missing:
        lines.append(
            "Error: files attached to this message were not found in /mnt/user-data/uploads "
            "(the upload did not arrive); tell the user and ask them to upload again:"
        )
        lines.extend(f"- {html.escape(name, quote=False)}" for name in missing)
    if current:
        lines.append("Files attached to this message:")
        for item in current:
            lines.extend(_line(item))
    if earlier:
        lines.append("Files uploaded earlier in this thread:")
        for item in earlier:
            lines.extend(_line(item))
    if omitted:
        lines.append(f"({omitted} more files are in /mnt/user-data/uploads; list them with ls)")
    lines.append("Read a file with read_file or bash when you need its contents.")
    lines.append(_CLOSE)
    return "\n".join(lines)
