"""Uploads into a thread and downloads of what the agent presented, over HTTP.

- ``POST /threads/{thread_id}/uploads``: multipart form, one or more file parts
  (any field name). Sizes are limited while the body streams
  (``uploads.max_file_bytes`` per file, ``uploads.max_files`` per request);
  names are sanitised to a safe basename; a same-named upload replaces the
  old one atomically. Answers ``{"files": [{filename, size, path}]}``; pass
  those entries as ``additional_kwargs.files`` on the next user message so
  UploadsMiddleware lists them as attached to it.
- ``GET /threads/{thread_id}/uploads``: the thread's uploads.
- ``GET /threads/{thread_id}/outputs/{path}``: a file under
  ``/mnt/user-data/outputs`` that the agent presented (state ``artifacts``);
  anything else is 404.

**Who may do this.** The routes sit behind the API's own authentication
(``http.enable_custom_route_auth`` in ``langgraph.json``) and take the caller
from ``auth.access.resolve_request_caller`` (the same fail-closed and Studio
rules as the API; no authenticated user at all is a 401). Files live in the
caller's bucket, ``caller.safe_id``, the id runs of that user resolve through
``resolve_runtime_user_id``. Ownership is never decided here: the route asks
the LangGraph API itself, in-process and with the caller's own request
headers, for the thread (``GET /threads/{id}``, or its state for downloads),
so a thread the caller cannot see, another user's included, answers 404
exactly like the API does.
"""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import os
import stat
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import quote

import httpx
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.routes._loopback import api_request
from auth.access import resolve_request_caller
from auth.identity import make_safe_user_id
from runtime.config import ConfigError, Settings, aget_settings
from runtime.paths import VIRTUAL_OUTPUTS, is_internal_output_path, thread_paths
from sandbox import hostfs as _hostfs
from sandbox.base import SandboxError
from sandbox.paths import parse_virtual_path
from sandbox.uploads import TEMP_PREFIX, list_uploads, sanitize_filename, uploads_root

__all__ = ["routes"]

_CHUNK = 256 * 1024
# Multipart framing and small form fields on top of the file bytes.
_REQUEST_OVERHEAD = 1024 * 1024


class _HTTPError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class _FileTooLarge(MultiPartException):
    pass


class _LimitedMultiPartParser(MultiPartParser):
    """Starlette's parser, with a per-file byte limit enforced while streaming."""

    def __init__(self, *args: Any, max_file_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_file_bytes = max_file_bytes
        self._file_bytes: dict[int, int] = {}

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._current_part
        if part.file is not None:
            seen = self._file_bytes.get(id(part), 0) + (end - start)
            self._file_bytes[id(part)] = seen
            if seen > self._max_file_bytes:
                raise _FileTooLarge(
                    f"{part.file.filename!r} is larger than the {self._max_file_bytes}-byte limit"
                )
        super().on_part_data(data, start, end)


def _json_error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def _thread_id(request: Request) -> str:
    raw = request.path_params["thread_id"]
    if make_safe_user_id(raw) != raw:
        raise _HTTPError(404, "thread not found")
    return str(raw)


async def _api_get(request: Request, path: str) -> httpx.Response:
    """GET the LangGraph API in-process, as the caller (their headers, their auth)."""
    return await api_request(request, "GET", path)


async def _visible_thread(request: Request, thread_id: str) -> None:
    response = await _api_get(request, f"/threads/{thread_id}")
    if response.status_code == 401:
        raise _HTTPError(401, "not authenticated")
    if response.status_code != 200:
        raise _HTTPError(404, "thread not found")


@dataclass(frozen=True)
class _Caller:
    settings: Settings
    user_id: str
    thread_id: str


async def _caller(request: Request) -> _Caller:
    try:
        settings = await aget_settings()
    except ConfigError as exc:
        raise _HTTPError(500, str(exc)) from None
    try:
        caller = await resolve_request_caller(request)
    except HTTPException as exc:
        raise _HTTPError(exc.status_code, str(exc.detail)) from None
    return _Caller(settings, caller.safe_id, _thread_id(request))


def _upload_root(caller: _Caller) -> _hostfs.HostRoot:
    data_root = caller.settings.data_root_path()
    return uploads_root(data_root, thread_paths(data_root, caller.user_id, caller.thread_id))


def _store(root: _hostfs.HostRoot, files: list[tuple[str, BinaryIO]]) -> list[int]:
    """Blocking: copy each spooled upload next to its final name, then rename over it."""
    _hostfs.ensure_dirs(root)
    dir_fd = _hostfs.open_dir(root, ())
    sizes: list[int] = []
    try:
        for name, source in files:
            temp = f"{TEMP_PREFIX}{uuid.uuid4().hex}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, 0o644, dir_fd=dir_fd)
            size = 0
            try:
                with os.fdopen(fd, "wb") as target:
                    source.seek(0)
                    while chunk := source.read(_CHUNK):
                        target.write(chunk)
                        size += len(chunk)
                os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                raise
            sizes.append(size)
    finally:
        os.close(dir_fd)
    return sizes


async def _capped(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise _HTTPError(413, f"the request body is larger than {limit} bytes")
        yield chunk


async def upload_files(request: Request) -> Response:
    try:
        caller = await _caller(request)
        await _visible_thread(request, caller.thread_id)
        limits = caller.settings.uploads
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise _HTTPError(415, "send the files as multipart/form-data")
        body_limit = limits.max_file_bytes * limits.max_files + _REQUEST_OVERHEAD
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > body_limit:
            raise _HTTPError(413, f"the request body is larger than {body_limit} bytes")
        parser = _LimitedMultiPartParser(
            request.headers,
            _capped(request, body_limit),
            max_files=limits.max_files,
            max_fields=100,
            max_part_size=64 * 1024,
            max_file_bytes=limits.max_file_bytes,
        )
        try:
            form = await parser.parse()
        except _FileTooLarge as exc:
            raise _HTTPError(413, str(exc)) from None
        except MultiPartException as exc:
            raise _HTTPError(400, str(exc)) from None
        try:
            uploads = [item for _, item in form.multi_items() if isinstance(item, UploadFile)]
            if not uploads:
                raise _HTTPError(400, "no file parts in the form")
            named: list[tuple[str, UploadFile]] = []
            for upload in uploads:
                name = sanitize_filename(upload.filename)
                if name is None:
                    raise _HTTPError(400, f"unusable file name {upload.filename!r}")
                if any(name == existing for existing, _ in named):
                    raise _HTTPError(400, f"two files in one request are both named {name!r}")
                named.append((name, upload))
            root = _upload_root(caller)
            try:
                sizes = await asyncio.to_thread(
                    _store, root, [(name, upload.file) for name, upload in named]
                )
            except (SandboxError, IsADirectoryError, NotADirectoryError) as exc:
                raise _HTTPError(409, f"cannot store the upload: {exc}") from None
        finally:
            await form.close()
    except _HTTPError as exc:
        return _json_error(exc.status, exc.detail)
    files = [
        {
            "filename": name,
            "original_filename": upload.filename,
            "size": size,
            "path": f"{root.virtual}/{name}",
        }
        for (name, upload), size in zip(named, sizes, strict=True)
    ]
    return JSONResponse({"files": files}, status_code=201)


async def list_uploaded(request: Request) -> Response:
    try:
        caller = await _caller(request)
        await _visible_thread(request, caller.thread_id)
    except _HTTPError as exc:
        return _json_error(exc.status, exc.detail)
    entries = await asyncio.to_thread(list_uploads, _upload_root(caller))
    return JSONResponse(
        {
            "files": [
                {
                    "filename": e.filename,
                    "size": e.size,
                    "path": e.virtual_path,
                    "modified": e.modified,
                }
                for e in entries
            ]
        }
    )


def _open_output(root: _hostfs.HostRoot, parts: tuple[str, ...]) -> tuple[BinaryIO, int]:
    """Blocking: open a presented file without following links."""
    dir_fd = _hostfs.open_dir(root, parts[:-1])
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise SandboxError("not a regular file")
    return os.fdopen(fd, "rb"), info.st_size


async def _stream(handle: BinaryIO) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(handle.read, _CHUNK):
            yield chunk
    finally:
        await asyncio.to_thread(handle.close)


async def download_output(request: Request) -> Response:
    try:
        caller = await _caller(request)
        try:
            virtual = parse_virtual_path(f"{VIRTUAL_OUTPUTS}/{request.path_params['path']}")
        except SandboxError:
            raise _HTTPError(404, "not found") from None
        if virtual.root != VIRTUAL_OUTPUTS or not virtual.parts:
            raise _HTTPError(404, "not found")
        if is_internal_output_path(
            "/".join(virtual.parts), caller.settings.tool_output.storage_subdir
        ):
            raise _HTTPError(404, "not found (internal tool-output storage)")
        state = await _api_get(request, f"/threads/{caller.thread_id}/state")
        if state.status_code == 401:
            raise _HTTPError(401, "not authenticated")
        if state.status_code != 200:
            raise _HTTPError(404, "not found")
        values = state.json().get("values")
        artifacts = values.get("artifacts") if isinstance(values, dict) else None
        if not isinstance(artifacts, list) or virtual.virtual not in artifacts:
            raise _HTTPError(404, "not found (only presented files can be downloaded)")
        data_root = caller.settings.data_root_path()
        paths = thread_paths(data_root, caller.user_id, caller.thread_id)
        root = _hostfs.HostRoot(
            VIRTUAL_OUTPUTS, data_root, paths.outputs.relative_to(data_root).parts
        )
        try:
            handle, size = await asyncio.to_thread(_open_output, root, virtual.parts)
        except (SandboxError, OSError):
            raise _HTTPError(404, "not found") from None
    except _HTTPError as exc:
        return _json_error(exc.status, exc.detail)
    filename = virtual.parts[-1]
    media_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    headers = {
        "Content-Length": str(size),
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-store",
    }
    return StreamingResponse(_stream(handle), media_type=media_type, headers=headers)


routes = [
    Route("/threads/{thread_id}/uploads", upload_files, methods=["POST"]),
    Route("/threads/{thread_id}/uploads", list_uploaded, methods=["GET"]),
    Route("/threads/{thread_id}/outputs/{path:path}", download_output, methods=["GET"]),
]
