"""Token usage arithmetic shared by TokenUsage (23), TokenBudget (33) and CompletedSubagentUsage.

Why here: three middlewares read the same facts (a model answer's
``usage_metadata``, a terminal ``task`` result's ``subagent_token_usage``) and
must agree on them, above all on **attributing a child's usage exactly once**:
``attribute_subagent_usage`` adds a terminal task result's usage to its
dispatching ``AIMessage`` (``additional_kwargs["subagent_token_usage"]``,
cumulative) and marks the ``ToolMessage`` ``subagent_token_usage_attributed``
in the same update, so replay or re-entry cannot count it twice. A result with
missing or malformed usage, or without a dispatching message in view, stays
unmarked and is retried later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from middlewares._prefix_fold import prefix_count
from subagents.contract import KEY_TOKEN_USAGE, TERMINAL_STATUSES, read_task_result_metadata

__all__ = [
    "ATTRIBUTED_KEY",
    "SUBAGENT_USAGE_KEY",
    "add_usage",
    "attribute_subagent_usage",
    "latest_run_stamp",
    "message_usage",
]

ATTRIBUTED_KEY = "subagent_token_usage_attributed"
SUBAGENT_USAGE_KEY = "subagent_token_usage"
_COUNTERS = ("input_tokens", "output_tokens", "total_tokens")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def message_usage(message: AIMessage) -> dict[str, int]:
    """The model call's own usage (zeros when the provider reported none), cache included."""
    usage: Mapping[str, Any] = message.usage_metadata or {}
    result = {key: _int(usage.get(key)) for key in _COUNTERS}
    if not result["total_tokens"]:
        result["total_tokens"] = result["input_tokens"] + result["output_tokens"]
    details = usage.get("input_token_details") or {}
    if isinstance(details, Mapping):
        for source, target in (
            ("cache_read", "cache_read_tokens"),
            ("cache_creation", "cache_creation_tokens"),
        ):
            amount = _int(details.get(source))
            if amount:
                result[target] = amount
    return result


def add_usage(total: Mapping[str, Any] | None, more: Mapping[str, Any]) -> dict[str, int]:
    result = {k: _int(v) for k, v in (total or {}).items() if isinstance(k, str)}
    for key, value in more.items():
        result[key] = result.get(key, 0) + _int(value)
    return result


def _is_unattributed(message: Any) -> bool:
    if not isinstance(message, ToolMessage):
        return False
    kwargs = message.additional_kwargs or {}
    return KEY_TOKEN_USAGE in kwargs and kwargs.get(ATTRIBUTED_KEY) is not True


# Unattributed child results in a history, resumed per history (checked every step).
_unattributed = prefix_count(_is_unattributed)


def attribute_subagent_usage(
    messages: Sequence[BaseMessage],
) -> tuple[list[BaseMessage], dict[str, int]]:
    """(replacement messages, usage attributed now) for unattributed terminal task results."""
    if not _unattributed(messages):
        return [], {}
    owners: dict[str, int] = {}
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                call_id = call.get("id")
                if isinstance(call_id, str):
                    owners[call_id] = index
    attributed: dict[int, dict[str, int]] = {}
    marked: list[BaseMessage] = []
    added: dict[str, int] = {}
    for message in messages:
        if not isinstance(message, ToolMessage):
            continue
        kwargs = message.additional_kwargs or {}
        if kwargs.get(ATTRIBUTED_KEY) is True or KEY_TOKEN_USAGE not in kwargs:
            continue
        meta = read_task_result_metadata(kwargs)
        if meta is None or meta["status"] not in TERMINAL_STATUSES or "token_usage" not in meta:
            continue
        owner = owners.get(message.tool_call_id)
        if owner is None or not message.id or not messages[owner].id:
            continue
        usage = dict(meta["token_usage"])
        attributed[owner] = add_usage(attributed.get(owner), usage)
        added = add_usage(added, usage)
        marked.append(
            message.model_copy(update={"additional_kwargs": {**kwargs, ATTRIBUTED_KEY: True}})
        )
    updates: list[BaseMessage] = []
    for index, child_usage in attributed.items():
        owner_message = messages[index]
        kwargs = owner_message.additional_kwargs or {}
        merged = add_usage(
            kwargs.get(SUBAGENT_USAGE_KEY)
            if isinstance(kwargs.get(SUBAGENT_USAGE_KEY), Mapping)
            else None,
            child_usage,
        )
        updates.append(
            owner_message.model_copy(
                update={"additional_kwargs": {**kwargs, SUBAGENT_USAGE_KEY: merged}}
            )
        )
    return [*updates, *marked], added


def latest_run_stamp(
    messages: Sequence[BaseMessage], key: str, run_id: str, *, before: int
) -> dict[str, Any] | None:
    """The newest ``response_metadata[key]`` stamped for ``run_id`` on an AI message
    before index ``before``, looking back no further than the latest user turn.

    Why stamps on AI messages: the model node writes ``messages`` on every step
    anyway, so a running total riding the answer costs no extra channel write,
    and summarization always keeps the newest answer. Stopping at the user turn
    makes an invocation without a run id start afresh.
    """
    from middlewares.durable_context import is_user_turn

    for index in range(min(before, len(messages)) - 1, -1, -1):
        message = messages[index]
        if is_user_turn(message):
            return None
        if isinstance(message, AIMessage):
            stamp = (message.response_metadata or {}).get(key)
            if isinstance(stamp, Mapping) and stamp.get("run_id") == run_id:
                return dict(stamp)
    return None
