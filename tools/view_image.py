"""``view_image``: let a vision model look at an image file (vision models only).

The tool validates the image and records a lightweight entry in state
``viewed_images`` (type, size, hash), never the bytes; its ``ToolMessage``
only says the image was viewed, so checkpoints hold no base64.
ViewImageMiddleware (spec number 26) re-reads the newest viewed images into
each model request as hidden, request-only context.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.tools import tool
from langgraph.types import Command

from sandbox.base import SandboxError
from sandbox.paths import parse_virtual_path
from sandbox.session import SandboxBinding
from tools._common import ToolOutcome, mark_sandbox_tool, run_sandbox_tool

__all__ = ["MAX_IMAGE_BYTES", "sniff_image_type", "view_image"]

MAX_IMAGE_BYTES = 20 * 1024 * 1024


def sniff_image_type(data: bytes) -> str | None:
    """The MIME type from the file's magic bytes (never from its name)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@tool("view_image", parse_docstring=True)
async def _view_image(image_path: str, runtime: ToolRuntime[Any, Any]) -> str | Command[Any]:
    """Look at an image file (PNG, JPEG, GIF or WebP) from the sandbox.

    Args:
        image_path: Path of the image, e.g. /mnt/user-data/uploads/chart.png.
    """

    async def operation(binding: SandboxBinding) -> ToolOutcome:
        virtual = parse_virtual_path(image_path).virtual
        data = await binding.sandbox.download_bytes(virtual)
        if len(data) > MAX_IMAGE_BYTES:
            raise SandboxError(f"{virtual}: the image is larger than {MAX_IMAGE_BYTES} bytes")
        mime = sniff_image_type(data)
        if mime is None:
            raise SandboxError(f"{virtual}: not a PNG, JPEG, GIF or WebP image")
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        record = {"mime_type": mime, "size": len(data), "sha256": digest}
        text = (
            f"Viewed image {virtual} ({mime}, {len(data)} bytes). "
            "It is attached to your next request."
        )
        return ToolOutcome(text, update={"viewed_images": {virtual: record}})

    return await run_sandbox_tool("view_image", runtime, operation)


view_image = mark_sandbox_tool(_view_image)
