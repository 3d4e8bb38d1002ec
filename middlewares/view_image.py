"""ViewImageMiddleware (spec 000, number 26): viewed images in the request, never in state.

``view_image`` records only a lightweight entry in ``viewed_images`` (type,
size, hash); its ``ToolMessage`` says the image was viewed and carries no
bytes, so checkpoints stay small. This middleware (vision models only) puts
the images back into each model request: it re-reads the newest records
through the run's own sandbox (resolved for the run's user and thread, so a
record copied from another thread, or a file deleted since, is simply
skipped), and appends one hidden ``HumanMessage`` with image blocks, stamped
with server provenance (``viewed_image`` from ``view_image``).

The rebuild is request-only (``wrap_model_call``): nothing it builds enters
state. Stale server-marked context in the request (from older checkpoints or
earlier versions that persisted it) is removed first; removal needs both the
reserved id prefix and the marker, so user and unmarked messages stay. Caps:
at most ``max_images`` (4) most recent images and ``max_base64_bytes``
(28 MiB) of base64 per request; a constructor may only tighten them. An image
that would exceed the budget is skipped and older ones still get a chance.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage

from deerflow_extension_api.provenance import (
    ContentKind,
    ProducerKind,
    provenance_kwargs,
    read_provenance,
)
from middlewares._prefix_fold import prefix_count
from middlewares._sync import run_sync
from runtime.config import Settings
from sandbox.base import SandboxError, SandboxProvider
from sandbox.paths import parse_virtual_path
from sandbox.provider import get_sandbox_provider
from sandbox.session import SandboxBinding, resolve_binding
from tools.view_image import MAX_IMAGE_BYTES, sniff_image_type

__all__ = [
    "MAX_BASE64_BYTES",
    "MAX_IMAGES",
    "VIEWED_IMAGE_ID_PREFIX",
    "VIEWED_IMAGE_MARKER",
    "ViewImageMiddleware",
    "is_viewed_image_context",
]

logger = logging.getLogger(__name__)

MAX_IMAGES = 4
MAX_BASE64_BYTES = 28 * 1024 * 1024
VIEWED_IMAGE_ID_PREFIX = "deerflow-viewed-images:"
VIEWED_IMAGE_MARKER = "deerflow_viewed_images"


def base64_size(raw_size: int) -> int:
    return 4 * ((raw_size + 2) // 3)


def is_viewed_image_context(message: BaseMessage) -> bool:
    """Server-built image context: reserved id prefix *and* marker *and* provenance."""
    if not isinstance(message, HumanMessage):
        return False
    if not str(message.id or "").startswith(VIEWED_IMAGE_ID_PREFIX):
        return False
    kwargs = message.additional_kwargs or {}
    if not kwargs.get(VIEWED_IMAGE_MARKER):
        return False
    provenance = read_provenance(message)
    return provenance is not None and provenance.content_kind == ContentKind.VIEWED_IMAGE.value


# Image contexts in a history (normally none: they ride the request only).
_image_contexts = prefix_count(is_viewed_image_context)


@dataclass(frozen=True)
class _Image:
    path: str
    mime_type: str
    encoded: str
    changed: bool


def _records(state: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """Viewed-image records, newest first; malformed entries (state is client-writable) dropped."""
    raw = state.get("viewed_images") if isinstance(state, Mapping) else None
    if not isinstance(raw, Mapping):
        return []
    items = [(p, r) for p, r in raw.items() if isinstance(p, str) and isinstance(r, Mapping)]
    return list(reversed(items))


def _encode(data: bytes) -> tuple[str | None, str, str]:
    return sniff_image_type(data), hashlib.sha256(data).hexdigest(), base64.b64encode(data).decode()


class ViewImageMiddleware(AgentMiddleware[Any, Any]):
    """Rebuild viewed images as hidden request-only context for vision models."""

    deerflow_fusable = True  # hooks never interrupt: may share a node

    def __init__(
        self,
        settings: Settings,
        *,
        max_images: int = MAX_IMAGES,
        max_base64_bytes: int = MAX_BASE64_BYTES,
        provider: SandboxProvider | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(max_images, int) or not 1 <= max_images <= MAX_IMAGES:
            raise ValueError(f"max_images must be an integer from 1 to {MAX_IMAGES}")
        if not isinstance(max_base64_bytes, int) or not 1 <= max_base64_bytes <= MAX_BASE64_BYTES:
            raise ValueError(f"max_base64_bytes must be an integer from 1 to {MAX_BASE64_BYTES}")
        self._settings = settings
        self.max_images = max_images
        self.max_base64_bytes = max_base64_bytes
        self._provider = provider

    @property
    def provider(self) -> SandboxProvider:
        if self._provider is None:
            self._provider = get_sandbox_provider(self._settings)
        return self._provider

    # --- plan ----------------------------------------------------------------

    async def _binding(self, request: ModelRequest[Any]) -> SandboxBinding | None:
        try:
            # The owner check: the state's sandbox id is used only if that sandbox
            # belongs to this run's user and thread; otherwise theirs is acquired.
            return await resolve_binding(
                self._settings, request.state, request.runtime, provider=self.provider
            )
        except SandboxError as exc:
            logger.info("viewed images skipped: no sandbox for this run (%s)", exc)
            return None

    async def _read(
        self, binding: SandboxBinding, path: str, record: Mapping[str, Any], budget: int
    ) -> _Image | None:
        try:
            virtual = parse_virtual_path(path).virtual
        except SandboxError:
            return None
        if virtual != path:
            return None  # only canonical virtual paths, as view_image records them
        size = record.get("size")
        if isinstance(size, int) and base64_size(size) > budget:
            return None  # over budget before reading
        try:
            data = await binding.sandbox.download_bytes(virtual)
        except (SandboxError, OSError) as exc:
            logger.info("viewed image %s skipped: %s", virtual, exc)
            return None
        if len(data) > MAX_IMAGE_BYTES or base64_size(len(data)) > budget:
            return None
        mime, digest, encoded = await asyncio.to_thread(_encode, data)
        if mime is None:
            return None
        return _Image(virtual, mime, encoded, changed=digest != record.get("sha256"))

    async def _collect(self, request: ModelRequest[Any]) -> list[_Image]:
        records = _records(request.state)
        if not records:
            return []
        binding = await self._binding(request)
        if binding is None:
            return []
        images: list[_Image] = []
        budget = self.max_base64_bytes
        for path, record in records:
            if len(images) >= self.max_images:
                break
            image = await self._read(binding, path, record, budget)
            if image is not None:
                images.append(image)
                budget -= len(image.encoded)
        images.reverse()  # oldest first, newest closest to the model's turn
        return images

    def _context(self, images: Sequence[_Image]) -> HumanMessage:
        content: list[str | dict[str, Any]] = [
            {
                "type": "text",
                "text": (
                    "<viewed-images>\nImages you viewed with view_image, re-read for this "
                    "request (oldest first).\n</viewed-images>"
                ),
            }
        ]
        for image in images:
            note = " (changed since you viewed it)" if image.changed else ""
            content.append({"type": "text", "text": f"Image {image.path}{note}:"})
            content.append({"type": "image", "base64": image.encoded, "mime_type": image.mime_type})
        key = hashlib.sha256("\n".join(i.path for i in images).encode()).hexdigest()[:16]
        return HumanMessage(
            content=content,
            id=f"{VIEWED_IMAGE_ID_PREFIX}{key}",
            **provenance_kwargs(
                ContentKind.VIEWED_IMAGE,
                ProducerKind.VIEW_IMAGE,
                additional_kwargs={"hide_from_ui": True, VIEWED_IMAGE_MARKER: True},
            ),
        )

    def _rebuilt(self, request: ModelRequest[Any], images: Sequence[_Image]) -> ModelRequest[Any]:
        if not images and not _image_contexts(request.messages):
            return request  # the common case, decided per new message only
        kept: list[AnyMessage] = [m for m in request.messages if not is_viewed_image_context(m)]
        if images:
            kept.append(self._context(images))
        if len(kept) == len(request.messages) and not images:
            return request
        return request.override(messages=kept)

    # --- hooks ---------------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        images = (
            run_sync(self._collect(request), name="view-image") if _records(request.state) else []
        )
        return handler(self._rebuilt(request, images))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        images = await self._collect(request)
        return await handler(self._rebuilt(request, images))
