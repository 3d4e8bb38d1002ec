"""Message provenance: who put a message into the conversation, and what it is.

Middlewares that inject or rewrite messages *that enter state* stamp them with
``provenance_kwargs(...)``; clients and extensions read the server-owned keys
``deerflow_content_kind``, ``deerflow_producer_kind`` and (optionally)
``deerflow_entity_id`` from ``additional_kwargs``. Stamp even without
observers: the keys are the wire contract. Rewrites that only change the
model-bound request view and never enter state need no stamp.

The keys are server-owned: a caller cannot be trusted to set them, so input
messages have them removed (``strip_provenance``) by the auth layer before a
run starts, and readers validate what they find (``read_provenance``).

Example::

    HumanMessage(
        content=reminder,
        **provenance_kwargs(
            "dynamic_context_memory",
            ProducerKind.DYNAMIC_CONTEXT,
            additional_kwargs={"hide_from_ui": True},
        ),
    )
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTENT_KIND_KEY",
    "ENTITY_ID_KEY",
    "PRODUCER_KIND_KEY",
    "PROVENANCE_KEYS",
    "ContentKind",
    "ProducerKind",
    "Provenance",
    "SystemOperationKind",
    "provenance_kwargs",
    "read_provenance",
    "strip_provenance",
]

CONTENT_KIND_KEY = "deerflow_content_kind"
PRODUCER_KIND_KEY = "deerflow_producer_kind"
ENTITY_ID_KEY = "deerflow_entity_id"
PROVENANCE_KEYS = (CONTENT_KIND_KEY, PRODUCER_KIND_KEY, ENTITY_ID_KEY)

_KIND = re.compile(r"^[a-z][a-z0-9_.:-]{0,63}$")
_MAX_ENTITY_ID = 256


class ProducerKind(enum.StrEnum):
    """Middlewares that put messages into state (spec 000, "Message provenance")."""

    DYNAMIC_CONTEXT = "dynamic_context"
    DURABLE_CONTEXT = "durable_context"
    SYSTEM_MESSAGE_COALESCING = "system_message_coalescing"
    VIEW_IMAGE = "view_image"
    SKILL_ACTIVATION = "skill_activation"
    EXTENSION = "extension"


class SystemOperationKind(enum.StrEnum):
    """Server operations that produce text from the conversation itself."""

    SUMMARIZATION = "summarization"
    TITLE = "title"
    MEMORY = "memory"
    COMPACTION = "compaction"


class ContentKind(enum.StrEnum):
    """Well-known content kinds; any other lower-case identifier is allowed."""

    DYNAMIC_CONTEXT_REMINDER = "dynamic_context_reminder"
    DYNAMIC_CONTEXT_MEMORY = "dynamic_context_memory"
    DURABLE_CONTEXT_DATA = "durable_context_data"
    DURABLE_CONTEXT_RULES = "durable_context_rules"
    SKILL_ACTIVATION = "skill_activation"
    VIEWED_IMAGE = "viewed_image"
    COALESCED_SYSTEM = "coalesced_system"
    SUMMARY = "summary"


def _kind(value: str | enum.Enum, what: str) -> str:
    text = value.value if isinstance(value, enum.Enum) else value
    if not isinstance(text, str) or not _KIND.match(text):
        raise ValueError(
            f"provenance {what} must be a lower-case identifier (letters, digits, _ . : -; "
            f"at most 64 characters), got {value!r}"
        )
    return text


def provenance_kwargs(
    content_kind: str | enum.Enum,
    producer_kind: str | enum.Enum,
    *,
    entity_id: str | None = None,
    additional_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Constructor kwargs (``additional_kwargs``) stamping server-owned provenance.

    ``additional_kwargs`` are merged in; the provenance keys always win, so a
    copied caller value can never survive the stamp.
    """
    stamped: dict[str, Any] = {
        k: v for k, v in (additional_kwargs or {}).items() if k not in PROVENANCE_KEYS
    }
    stamped[CONTENT_KIND_KEY] = _kind(content_kind, "content kind")
    stamped[PRODUCER_KIND_KEY] = _kind(producer_kind, "producer kind")
    if entity_id is not None:
        if not isinstance(entity_id, str) or not entity_id or len(entity_id) > _MAX_ENTITY_ID:
            raise ValueError(
                f"provenance entity id must be a non-empty string of at most {_MAX_ENTITY_ID} "
                f"characters, got {entity_id!r}"
            )
        stamped[ENTITY_ID_KEY] = entity_id
    return {"additional_kwargs": stamped}


@dataclass(frozen=True)
class Provenance:
    content_kind: str
    producer_kind: str
    entity_id: str | None = None


def read_provenance(message: Any) -> Provenance | None:
    """The validated provenance of ``message`` (a message or a dict), or None.

    Malformed values (wrong types, bad identifiers) read as "no provenance",
    never as an error: persisted metadata is untrusted input.
    """
    kwargs = getattr(message, "additional_kwargs", None)
    if kwargs is None and isinstance(message, Mapping):
        kwargs = message.get("additional_kwargs")
    if not isinstance(kwargs, Mapping):
        return None
    content, producer = kwargs.get(CONTENT_KIND_KEY), kwargs.get(PRODUCER_KIND_KEY)
    if not (isinstance(content, str) and _KIND.match(content)):
        return None
    if not (isinstance(producer, str) and _KIND.match(producer)):
        return None
    entity = kwargs.get(ENTITY_ID_KEY)
    if not (isinstance(entity, str) and 0 < len(entity) <= _MAX_ENTITY_ID):
        entity = None
    return Provenance(content, producer, entity)


def strip_provenance(additional_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``additional_kwargs`` without the server-owned provenance keys (for input messages)."""
    return {k: v for k, v in (additional_kwargs or {}).items() if k not in PROVENANCE_KEYS}
