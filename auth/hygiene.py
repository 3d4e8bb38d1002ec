"""Run-input hygiene: strip what only the server may set before a run starts.

The spec's "Gateway strips caller-supplied values" happens here, in the
``threads.create_run`` authorization handler, which sees (and may rewrite in
place) the run's ``kwargs`` before the server stores the run:

- ``context`` and ``config.configurable``: ``__``-prefixed keys, identity and
  role overrides (``user_id``, ``user_role``, ``is_internal``),
  ``langgraph_auth_*`` keys, and the run's ids (``thread_id``, ``run_id``,
  ``assistant_id``, ``graph_id``), which the server sets itself.
- input messages (and ``command.update`` messages): the server-owned
  provenance ``additional_kwargs.original_user_content`` and every
  ``additional_kwargs.deerflow_*`` key (``deerflow_content_kind``,
  ``deerflow_producer_kind``, ...). Caller-supplied provenance is not trusted.

By the time the handler runs, the server has already added its own keys to
``configurable`` (auth user, request id, ``__after_seconds__``...). Those are
kept: ``configurable`` loses only reserved keys the caller sent or that the
server never sets. ``context`` holds only what the caller sent, so every
reserved key goes. Then the server-owned ``user_id`` is written into both, so
the graph sees the authenticated user however it looks.

Everything is edited **in place**: the server holds references to these dicts
(``Runs.put`` reads ``config`` through a local bound before the handler runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

__all__ = [
    "RESERVED_CONTEXT_KEYS",
    "RESERVED_STATE_KEYS",
    "SERVER_AUTH_KEYS",
    "RejectedInput",
    "is_reserved_key",
    "message_kind",
    "sanitize_input",
    "sanitize_message",
    "sanitize_run_kwargs",
    "sanitize_state_values",
    "sanitize_thread_create",
    "strip_reserved",
]

# Identity and role overrides, and the run's own ids (the server sets those in
# ``configurable`` after this handler; a copy in ``context`` would shadow them
# for code that reads context first).
RESERVED_CONTEXT_KEYS = frozenset(
    {"user_id", "user_role", "is_internal", "thread_id", "run_id", "assistant_id", "graph_id"}
)
AUTH_KEY_PREFIX = "langgraph_auth_"
# Set by the server from the authenticated request, after the caller's values.
SERVER_AUTH_KEYS = frozenset(
    {"langgraph_auth_user", "langgraph_auth_user_id", "langgraph_auth_permissions"}
)
# ``__`` keys the server itself places into ``configurable`` before the handler.
_SERVER_DUNDER_KEYS = frozenset(
    {
        "__context_provided__",
        "__after_seconds__",
        "__request_start_time_ms__",
        "__langsmith_project__",
        "__langsmith_example_id__",
        "__event_streaming_v2",
        "__encryption_context__",
    }
)
# Of those, the ones kept even when the caller's keys include them: the server
# always overwrites the first two, and sets the v2 streaming marker before it
# copies ``configurable`` into ``context`` (so it shows up as a "caller" key).
_ALWAYS_SERVER_SET = frozenset(
    {"__context_provided__", "__after_seconds__", "__event_streaming_v2"}
)
_PROVENANCE_KEY = "original_user_content"
_PROVENANCE_PREFIX = "deerflow_"


def is_reserved_key(key: Any) -> bool:
    """True for keys only the server may set in a run's context or configurable."""
    if not isinstance(key, str):
        return False
    return key.startswith("__") or key in RESERVED_CONTEXT_KEYS or key.startswith(AUTH_KEY_PREFIX)


def strip_reserved(mapping: Any) -> list[str]:
    """Remove every reserved key from a caller-owned mapping; return what went."""
    if not isinstance(mapping, MutableMapping):
        return []
    removed = [key for key in mapping if is_reserved_key(key)]
    for key in removed:
        del mapping[key]
    return removed


def _strip_configurable(
    configurable: Any, caller_keys: Iterable[str], *, all_from_caller: bool = False
) -> list[str]:
    """``all_from_caller``: nothing in it is server-set yet (a stored cron payload)."""
    if not isinstance(configurable, MutableMapping):
        return []
    from_caller = set(caller_keys)
    removed: list[str] = []
    for key in list(configurable):
        if not isinstance(key, str):
            continue
        if key in RESERVED_CONTEXT_KEYS or (
            all_from_caller and (key.startswith(AUTH_KEY_PREFIX) or key.startswith("__"))
        ):
            drop = True
        elif key.startswith(AUTH_KEY_PREFIX):
            drop = key not in SERVER_AUTH_KEYS
        elif key.startswith("__"):
            drop = key not in _SERVER_DUNDER_KEYS or (
                key in from_caller and key not in _ALWAYS_SERVER_SET
            )
        else:
            drop = False
        if drop:
            del configurable[key]
            removed.append(key)
    return removed


def sanitize_message(message: Any) -> list[str]:
    """Drop caller-supplied provenance from one message (dict forms only)."""
    if not isinstance(message, MutableMapping):
        return []
    removed: list[str] = []
    # LangChain's serialized form keeps the fields under "kwargs".
    if message.get("lc") == 1 and isinstance(message.get("kwargs"), MutableMapping):
        removed.extend(sanitize_message(message["kwargs"]))
    # LangChain turns unknown top-level keys of a message dict into
    # additional_kwargs, so server-owned keys are dropped there too.
    for key in list(message):
        if key == _PROVENANCE_KEY or (isinstance(key, str) and key.startswith(_PROVENANCE_PREFIX)):
            del message[key]
            removed.append(key)
    extra = message.get("additional_kwargs")
    if isinstance(extra, MutableMapping):
        for key in list(extra):
            if key == _PROVENANCE_KEY or (
                isinstance(key, str) and key.startswith(_PROVENANCE_PREFIX)
            ):
                del extra[key]
                removed.append(f"additional_kwargs.{key}")
    return removed


class RejectedInput(ValueError):
    """Run input that is refused as a whole, with a reason the caller can act on."""


# LangChain's constructor envelope (``{"lc": 1, "type": "constructor", "id":
# [..., "SystemMessage"], "kwargs": {...}}``): class name -> message type, as
# ``langchain_core.messages.utils._convert_to_message`` maps it.
_CONSTRUCTOR_TYPES = {
    "HumanMessage": "human",
    "HumanMessageChunk": "human",
    "AIMessage": "ai",
    "AIMessageChunk": "ai",
    "SystemMessage": "system",
    "SystemMessageChunk": "system",
    "FunctionMessage": "function",
    "FunctionMessageChunk": "function",
    "ToolMessage": "tool",
    "ToolMessageChunk": "tool",
    "RemoveMessage": "remove",
}
_SYSTEM_KINDS = frozenset({"system", "developer"})
_MAX_DEPTH = 8


def message_kind(message: Any, _depth: int = 0) -> str | None:
    """The message type LangChain would build from ``message``, or None if it builds none.

    Follows ``convert_to_messages``: a string is a human message; a
    two-element sequence is ``(type, content)``; a constructor envelope maps its
    class name and lets ``kwargs`` override it (``{"type": mapped, **kwargs}``);
    a dict's ``role`` wins over its ``type``.
    """
    if _depth > _MAX_DEPTH:
        return None
    if isinstance(message, str):
        return "human"
    if isinstance(message, list | tuple):
        if len(message) == 2 and isinstance(message[0], str):
            return message[0]
        return None
    if not isinstance(message, Mapping):
        return None
    identifier, fields = message.get("id"), message.get("kwargs")
    if (
        message.get("lc") == 1
        and isinstance(identifier, list)
        and identifier
        and isinstance(fields, Mapping)
    ):
        mapped = _CONSTRUCTOR_TYPES.get(str(identifier[-1]))
        if mapped is not None:
            return message_kind({"type": mapped, **fields}, _depth + 1)
    kind = message.get("role", message.get("type"))
    return kind if isinstance(kind, str) else None


def _refuse_system_message(message: Any) -> None:
    """Callers may not send system messages: the agent's own prompt is the system.

    A caller's system message would be merged into the leading system prompt
    (SystemMessageCoalescing) and stamped as server-owned. Every encoding
    LangChain accepts is decided by ``message_kind`` (a ``["system", ...]``
    pair, a serialized ``SystemMessage``, ``role``/``type`` dicts).
    """
    kind = message_kind(message)
    if isinstance(kind, str) and kind.strip().lower() in _SYSTEM_KINDS:
        raise RejectedInput(
            "system messages are not accepted in run input; send the instruction as a user message"
        )


def _sanitize_messages(messages: Any) -> list[str]:
    if isinstance(messages, str):
        return []
    if isinstance(messages, Mapping):
        # One message rather than a list of them (LangChain wraps it in a list).
        _refuse_system_message(messages)
        return sanitize_message(messages)
    removed: list[str] = []
    if isinstance(messages, list | tuple):
        for item in messages:
            _refuse_system_message(item)
            removed.extend(sanitize_message(item))
    return removed


def sanitize_input(value: Any) -> list[str]:
    """Sanitize the messages of a run input (``{"messages": ...}`` or a message list)."""
    if isinstance(value, MutableMapping):
        return _sanitize_messages(value.get("messages"))
    if isinstance(value, list):
        return _sanitize_messages(value)
    return []


def _sanitize_command(command: Any) -> list[str]:
    if not isinstance(command, MutableMapping):
        return []
    update = command.get("update")
    if isinstance(update, MutableMapping):
        return _sanitize_messages(update.get("messages"))
    removed: list[str] = []
    if isinstance(update, list):  # [[channel, value], ...]
        for pair in update:
            if isinstance(pair, list | tuple) and len(pair) == 2 and pair[0] == "messages":
                removed.extend(_sanitize_messages(pair[1]))
    return removed


def sanitize_run_kwargs(
    kwargs: MutableMapping[str, Any], *, user_id: str | None = None, stored: bool = False
) -> list[str]:
    """Clean a run's kwargs in place; with ``user_id``, set the server-owned ``user_id``.

    ``stored``: a payload kept for later (crons), where every ``langgraph_auth_*``
    and ``__`` key is the caller's. Raises ``RejectedInput`` for input that is
    refused whole (system messages). Returns the removed keys (never values).
    """
    removed: list[str] = []
    context = kwargs.get("context")
    caller_keys = list(context) if isinstance(context, MutableMapping) else []
    removed.extend(f"context.{key}" for key in strip_reserved(context))
    config = kwargs.get("config")
    configurable = config.get("configurable") if isinstance(config, MutableMapping) else None
    removed.extend(
        f"configurable.{key}"
        for key in _strip_configurable(configurable, caller_keys, all_from_caller=stored)
    )
    removed.extend(f"input.{key}" for key in sanitize_input(kwargs.get("input")))
    removed.extend(f"command.{key}" for key in _sanitize_command(kwargs.get("command")))
    if user_id is not None:
        if isinstance(context, MutableMapping):
            context["user_id"] = user_id
        if isinstance(configurable, MutableMapping):
            configurable["user_id"] = user_id
    return removed


# Thread state channels only the server's middlewares write (``runtime.state``):
# a forged ``sandbox`` or ``thread_data`` would point a run at other resources.
RESERVED_STATE_KEYS = frozenset({"thread_data", "sandbox", "delegations", "artifacts"})


def sanitize_state_values(values: Any) -> list[str]:
    """Clean a direct state update (``POST /threads/{id}/state``) in place.

    The same hygiene as run input: caller provenance is dropped from messages,
    system messages are refused (``RejectedInput``), and the server-owned
    channels (``RESERVED_STATE_KEYS``) and ``__`` keys are removed. ``values``
    is a dict of channel values or a list of them.
    """
    if isinstance(values, list):
        return [key for item in values for key in sanitize_state_values(item)]
    if not isinstance(values, MutableMapping):
        return []
    removed = [
        key
        for key in list(values)
        if isinstance(key, str)
        and (key in RESERVED_STATE_KEYS or key.startswith("__") or key.startswith("deerflow_"))
    ]
    for key in removed:
        del values[key]
    removed.extend(f"values.{key}" for key in sanitize_input(values))
    return removed


def sanitize_thread_create(payload: Any) -> list[str]:
    """Clean the ``supersteps`` of ``POST /threads`` (a thread created with state)."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("supersteps"), list):
        return []
    removed: list[str] = []
    for step in payload["supersteps"]:
        updates = step.get("updates") if isinstance(step, Mapping) else None
        for update in updates if isinstance(updates, list) else []:
            if isinstance(update, MutableMapping):
                removed.extend(sanitize_state_values(update.get("values")))
                removed.extend(_sanitize_command(update.get("command")))
    return removed
