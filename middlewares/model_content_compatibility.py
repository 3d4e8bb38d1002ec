"""ModelContentCompatibilityMiddleware (spec 000, number 34): resource blocks a model accepts.

Most model serializers cannot send a URL-sourced ``file`` block, and no
provider can fetch an ``image`` from ``s3://`` or ``file://``. Such blocks in
history (from older checkpoints, MCP results, uploads) make every later
request fail. This read-time sanitizer rewrites, in the model-bound request
only (state is never written):

- ``file`` blocks that carry a ``url`` key (any role): kept when the URL is
  http(s) and the selected model's serializer accepts URL files (OpenAI
  Responses API, Anthropic); otherwise replaced by a text placeholder;
- ``image`` / ``image_url`` blocks whose URL scheme is not http, https or
  data: replaced by a text placeholder.

Placeholder metadata (name, MIME type, location) passes the shared
``neutralize_untrusted_tags`` guard; credentials, query strings and fragments
never reach the model; a malformed URL gives a location-less placeholder
instead of raising. Old checkpoints heal on the next turn with no migration.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage

from middlewares.model_response import block_type_is
from runtime.untrusted_content import neutralize_untrusted_tags

__all__ = [
    "ModelContentCompatibilityMiddleware",
    "heal_messages",
    "model_accepts_url_files",
    "model_visible_location",
    "resource_placeholder_text",
]

_FETCHABLE_IMAGE_SCHEMES = ("http", "https", "data")
_FIELD_LIMIT = 200


def _clean_field(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())[:_FIELD_LIMIT]
    return neutralize_untrusted_tags(text) or None


def model_visible_location(url: Any) -> str | None:
    """A location safe to show a model: no credentials, query or fragment; None if malformed."""
    if not isinstance(url, str) or not url.strip():
        return None
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if not scheme:
            return None
        if scheme == "data":
            return "inline data"
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return None
    location = f"{scheme}://{host}{port}{parts.path}"
    return _clean_field(location)


def resource_placeholder_text(
    kind: str, *, name: Any = None, mime_type: Any = None, location: str | None = None
) -> str:
    """Text standing in for a resource the model cannot receive."""
    details = [d for d in (_clean_field(name), _clean_field(mime_type)) if d]
    described = f" {' '.join(details)}" if details else ""
    where = f" at {location}" if location else ""
    return f"[{kind}{described}{where} - not included because this model cannot receive it]"


def model_accepts_url_files(model: BaseChatModel | Any) -> bool:
    """Whether the selected model's serializer sends http(s) file URLs as is."""
    names = {cls.__name__ for cls in type(model).__mro__}
    if "ChatAnthropic" in names:
        return True
    if "ChatOpenAI" in names or "AzureChatOpenAI" in names:
        if getattr(model, "use_responses_api", None) is True:
            return True
        return getattr(model, "output_version", None) == "responses/v1"
    return False


def _url_of(block: dict[str, Any]) -> Any:
    url = block.get("url")
    if url is None and isinstance(block.get("image_url"), dict):
        url = block["image_url"].get("url")
    elif url is None and isinstance(block.get("image_url"), str):
        url = block["image_url"]
    return url


def _scheme(url: Any) -> str | None:
    if not isinstance(url, str):
        return None
    try:
        return urlsplit(url.strip()).scheme.lower() or None
    except ValueError:
        return None


ODD_BLOCK_TEXT = "[unsupported content block]"


def _rewrite_block(block: Any, accepts_url_files: bool) -> Any:
    if isinstance(block, dict) and "type" in block and not isinstance(block["type"], str):
        # ``type: []`` / ``type: {}`` are legal JSON from a provider, but message
        # normalization hashes the type and would fail every later request of the
        # thread: the request view gets a text block instead (state keeps it).
        text = block.get("text")
        return {"type": "text", "text": text if isinstance(text, str) else ODD_BLOCK_TEXT}
    if block_type_is(block, ("file",)) and "url" in block:
        url = block.get("url")
        if accepts_url_files and _scheme(url) in ("http", "https"):
            return block
        return {
            "type": "text",
            "text": resource_placeholder_text(
                "file",
                name=block.get("filename") or block.get("name"),
                mime_type=block.get("mime_type"),
                location=model_visible_location(url),
            ),
        }
    if block_type_is(block, ("image", "image_url")):
        url = _url_of(block)
        if url is None:
            return block
        if _scheme(url) in _FETCHABLE_IMAGE_SCHEMES:
            return block
        return {
            "type": "text",
            "text": resource_placeholder_text(
                "image", mime_type=block.get("mime_type"), location=model_visible_location(url)
            ),
        }
    return block


def heal_messages(
    messages: list[AnyMessage], *, accepts_url_files: bool
) -> list[AnyMessage] | None:
    """The healed message list, or None when nothing needed healing."""
    healed: list[AnyMessage] = []
    changed = False
    for message in messages:
        content = message.content
        if isinstance(content, list):
            blocks = [_rewrite_block(block, accepts_url_files) for block in content]
            if any(new is not old for new, old in zip(blocks, content, strict=True)):
                message = message.model_copy(update={"content": blocks})
                changed = True
        healed.append(message)
    return healed if changed else None


class ModelContentCompatibilityMiddleware(AgentMiddleware[Any, Any]):
    """Replace resource blocks the selected model cannot receive (request view only)."""

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def _heal(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        healed = heal_messages(
            list(request.messages), accepts_url_files=model_accepts_url_files(request.model)
        )
        return request if healed is None else request.override(messages=healed)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._heal(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._heal(request))
