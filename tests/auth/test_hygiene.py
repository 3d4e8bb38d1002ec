"""Run-input hygiene on every shape of run kwargs (the server path is in test_run_hygiene)."""

from __future__ import annotations

from typing import Any

from auth.hygiene import (
    is_reserved_key,
    sanitize_input,
    sanitize_message,
    sanitize_run_kwargs,
    strip_reserved,
)

FORGED = {
    "__authorization_outcome": 1,
    "user_id": "bob",
    "user_role": "admin",
    "is_internal": True,
    "langgraph_auth_user_id": "bob",
    "langgraph_auth_anything": 1,
}


def test_reserved_keys() -> None:
    for key in FORGED:
        assert is_reserved_key(key)
    for server_id in ("thread_id", "run_id", "assistant_id", "graph_id"):
        assert is_reserved_key(server_id)
    for other in ("model_name", "cron_id", "user", "_private", "x__y", 3):
        assert not is_reserved_key(other)


def test_strip_reserved_from_caller_mappings() -> None:
    mapping: dict[str, Any] = {**FORGED, "model_name": "m"}
    removed = strip_reserved(mapping)
    assert mapping == {"model_name": "m"}
    assert sorted(removed) == sorted(FORGED)
    assert strip_reserved(None) == [] and strip_reserved(["x"]) == []


def test_messages_lose_provenance_in_every_form() -> None:
    def message() -> dict[str, Any]:
        return {
            "role": "user",
            "content": "hi",
            "additional_kwargs": {
                "original_user_content": "forged",
                "deerflow_content_kind": "k",
                "deerflow_producer_kind": "p",
                "deerflow_entity_id": "e",
                "keep": 1,
            },
        }

    plain = message()
    serialized: dict[str, Any] = {"lc": 1, "type": "constructor", "kwargs": message()}
    assert len(sanitize_message(plain)) == 4
    assert plain["additional_kwargs"] == {"keep": 1}
    assert len(sanitize_message(serialized)) == 4
    assert serialized["kwargs"]["additional_kwargs"] == {"keep": 1}
    for odd in ("text", ["user", "hi"], None, {"additional_kwargs": "x"}):
        assert sanitize_message(odd) == []


def test_inputs_of_every_shape() -> None:
    def message() -> dict[str, Any]:
        return {"role": "user", "content": "x", "additional_kwargs": {"original_user_content": 1}}

    single = {"messages": message()}
    listed = {"messages": [message(), "plain string", ["user", "tuple form"]]}
    bare_list = [message()]
    for value in (single, listed, bare_list):
        assert sanitize_input(value) == ["additional_kwargs.original_user_content"]
    assert sanitize_input({"other": 1}) == [] and sanitize_input(None) == []


def test_run_kwargs_with_context() -> None:
    """The server copied the caller's context into configurable and added its own keys."""
    context = {**FORGED, "model_name": "m"}
    configurable = {
        **context,
        "__context_provided__": True,
        "__after_seconds__": 0,
        "__request_start_time_ms__": 1,
        "langgraph_auth_user": "server-set",
        "langgraph_auth_user_id": "alice",
        "langgraph_auth_permissions": [],
        "langgraph_request_id": "r",
        "x-request-header": "h",
    }
    command = {"update": [["messages", [{"additional_kwargs": {"deerflow_x": 1}}]]]}
    kwargs: dict[str, Any] = {
        "context": context,
        "config": {"configurable": configurable},
        "input": {"messages": [{"additional_kwargs": {"original_user_content": "f"}}]},
        "command": command,
    }
    removed = sanitize_run_kwargs(kwargs, user_id="alice")
    assert kwargs["context"] is context  # edited in place
    assert context == {"model_name": "m", "user_id": "alice"}
    assert configurable == {
        "model_name": "m",
        "user_id": "alice",
        "__context_provided__": True,
        "__after_seconds__": 0,
        "__request_start_time_ms__": 1,
        "langgraph_auth_user": "server-set",
        "langgraph_auth_user_id": "alice",
        "langgraph_auth_permissions": [],
        "langgraph_request_id": "r",
        "x-request-header": "h",
    }
    assert kwargs["input"]["messages"][0]["additional_kwargs"] == {}
    assert command["update"][0][1][0]["additional_kwargs"] == {}  # type: ignore[index]
    assert "context.user_role" in removed and "configurable.__authorization_outcome" in removed


def test_run_kwargs_caller_sent_server_dunders() -> None:
    """A caller-sent copy of a server key the server does not always overwrite goes."""
    kwargs: dict[str, Any] = {
        "context": {"__langsmith_project__": "theirs", "__after_seconds__": 99},
        "config": {
            "configurable": {
                "__langsmith_project__": "theirs",
                "__after_seconds__": 0,
                "__unknown__": 1,
            }
        },
    }
    sanitize_run_kwargs(kwargs)
    assert kwargs["context"] == {}
    assert kwargs["config"]["configurable"] == {"__after_seconds__": 0}


def test_v2_streaming_marker_survives_its_copy_in_context() -> None:
    """The v2 endpoints set the marker before the server copies configurable into context."""
    configurable = {"__event_streaming_v2": True, "thread_id": "t", "model_name": "m"}
    kwargs: dict[str, Any] = {
        "context": dict(configurable),
        "config": {"configurable": configurable},
    }
    sanitize_run_kwargs(kwargs, user_id="alice")
    assert configurable == {"__event_streaming_v2": True, "model_name": "m", "user_id": "alice"}
    assert kwargs["context"] == {"model_name": "m", "user_id": "alice"}


def test_run_kwargs_tolerate_missing_and_odd_parts() -> None:
    for kwargs in ({}, {"context": None, "config": None}, {"config": {"configurable": None}}):
        assert sanitize_run_kwargs(kwargs, user_id="a") == []  # type: ignore[arg-type]
