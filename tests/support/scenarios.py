"""Scenario harness: the assembled chain, through the real server, turn by turn.

A scenario is one thread on the in-process LangGraph Server whose models are
``RecordingChatModel``s, so a test can assert on what the model *received*
on every call (after the whole chain ran), not only on what was persisted.

Extend it by adding a scenario test that builds a config with
:func:`scenario_config` (``all_optional=True`` switches every optional
middleware on; a new optional middleware adds its section to
``ALL_OPTIONAL``), then drives it with :class:`Scenario`::

    async def test_my_middleware(scenario):
        s = await scenario([ai_text("hi")], all_optional=True)
        await s.send("hello")
        s.assert_strict()              # strict-provider rules on every request
        assert "..." in s.calls[-1].text
        await s.assert_nothing_hidden_persisted()

The ``scenario`` fixture (``tests/scenarios/conftest.py``) writes the config,
makes it the served config and returns a :class:`Scenario` on a fresh thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.recording_model import ModelCall, clear_recordings, recorded_calls
from tests.support.scripted import recording_model_entry, write_config
from tests.support.strict_provider import check_strict_request

__all__ = [
    "ALL_OPTIONAL",
    "SCENARIO_TOOLS",
    "Scenario",
    "hidden_kinds",
    "new_key",
    "scenario_config",
]

# Every optional middleware switched on (the sections that gate them).
ALL_OPTIONAL: dict[str, Any] = {
    "pii_redaction": {"enabled": True},
    "safety_finish_reason": {"enabled": True},
    "dynamic_context": {"enabled": True},
    "loop_detection": {"enabled": True, "warn_threshold": 2, "hard_limit": 4},
    "title": {"enabled": True},
    "read_before_write": {"enabled": True},
    "tool_output": {"enabled": True},
    "verification": {"receipts_enabled": True},
    "llm_error_handling": {"enabled": True},
    # Governance: everything allowed to everyone, so behaviour is unchanged while
    # the gates (GuardrailMiddleware, sandbox authorization, ToolProgress) run.
    "authorization": {"enabled": True, "roles": {"member": ["*"]}, "default_role": "member"},
    "guardrails": {"enabled": True, "rules": [{"tool": "bash", "deny_pattern": "rm -rf /$"}]},
    "tool_progress": {"enabled": True},
    # Long conversations: usage and a budget far above any scenario's spend.
    "token_usage": {"enabled": True},
    "token_budget": {"enabled": True, "max_tokens_per_run": 100_000_000},
}

# Tools the scenarios use beside the built-in file tools.
SCENARIO_TOOLS: list[dict[str, str]] = [
    {"name": "echo", "group": "test", "use": "tests.support.tools:echo"},
    {
        "name": "ask_clarification",
        "group": "clarification",
        "use": "tools.clarification:ask_clarification",
    },
    {"name": "read_file", "group": "files", "use": "tools.files:read_file"},
    {"name": "write_file", "group": "files", "use": "tools.files:write_file"},
    {"name": "bash", "group": "sandbox", "use": "tools.sandbox:bash"},
]


def scenario_config(
    directory: Path,
    script: list[dict[str, Any]],
    *,
    key: str,
    worker: list[dict[str, Any]] | None = None,
    all_optional: bool = False,
    tools: list[dict[str, str]] | None = None,
    **sections: Any,
) -> Path:
    """A config whose lead model records under ``key`` (the worker's under ``key/worker``)."""
    models = [recording_model_entry(script, key=key, name="lead")]
    models.append(
        recording_model_entry(
            worker or [{"content": "worker done"}], key=f"{key}/worker", name="worker"
        )
    )
    merged: dict[str, Any] = dict(ALL_OPTIONAL) if all_optional else {}
    for name, value in sections.items():
        base = merged.get(name)
        merged[name] = (
            {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
        )
    merged.setdefault("subagents", {})
    if isinstance(merged["subagents"], dict):
        merged["subagents"] = {"model": "worker", **merged["subagents"]}
    return write_config(
        directory, models=models, tools=SCENARIO_TOOLS if tools is None else tools, **merged
    )


def hidden_kinds(message: dict[str, Any]) -> list[str]:
    """Markers of request-only content in a persisted (JSON) message, if any."""
    kwargs = message.get("additional_kwargs") or {}
    found = [
        k
        for k in (
            "dynamic_context_reminder",
            "deerflow_receipt_ledger",
            "deerflow_reminder",
        )
        if k in kwargs and message.get("type") == "human"
    ]
    if kwargs.get("deerflow_content_kind") in ("dynamic_context_reminder", "receipt_ledger"):
        found.append(str(kwargs["deerflow_content_kind"]))
    return found


@dataclass
class Scenario:
    """One thread on the served graph, with the lead's and worker's recorded calls."""

    client: Any
    key: str
    thread_id: str
    graph: str = "lead_agent"
    app: Any = None
    results: list[Any] = field(default_factory=list)

    @classmethod
    async def start(
        cls, client: Any, key: str, graph: str = "lead_agent", app: Any = None
    ) -> Scenario:
        clear_recordings(key)
        clear_recordings(f"{key}/worker")
        thread = await client.threads.create()
        return cls(client=client, key=key, thread_id=str(thread["thread_id"]), graph=graph, app=app)

    async def upload(self, files: dict[str, bytes]) -> list[dict[str, Any]]:
        """Upload files to the thread through the server's uploads route."""
        import httpx

        from tests.support.server import RequestScopedASGITransport

        async with httpx.AsyncClient(
            transport=RequestScopedASGITransport(app=self.app),
            base_url="http://deerflow.test",
            timeout=60,
        ) as http:
            response = await http.post(
                f"/threads/{self.thread_id}/uploads",
                files=[("files", (name, data)) for name, data in files.items()],
            )
        assert response.status_code == 201, response.text
        uploaded: list[dict[str, Any]] = response.json()["files"]
        return uploaded

    # -- driving -------------------------------------------------------------------

    async def send(
        self,
        text: str | list[Any],
        *,
        files: Sequence[str] = (),
        context: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """A new user turn (``runs.wait``); ``files`` names uploads attached to it."""
        message: dict[str, Any] = {"role": "user", "content": text}
        if files:
            message["additional_kwargs"] = {"files": [{"filename": f} for f in files]}
        result = await self.client.runs.wait(
            self.thread_id,
            self.graph,
            input={"messages": [message]},
            context=context,
            **kwargs,
        )
        self.results.append(result)
        return result

    async def resume(self, value: Any, **kwargs: Any) -> Any:
        """Resume the interrupted run with ``Command(resume=value)``."""
        result = await self.client.runs.wait(
            self.thread_id, self.graph, command={"resume": value}, **kwargs
        )
        self.results.append(result)
        return result

    async def state(self) -> dict[str, Any]:
        state: dict[str, Any] = await self.client.threads.get_state(self.thread_id)
        return state

    async def messages(self) -> list[dict[str, Any]]:
        """The persisted messages (what every client lists)."""
        values = (await self.state())["values"]
        return list(values.get("messages") or [])

    # -- what the model received -----------------------------------------------------

    @property
    def calls(self) -> list[ModelCall]:
        return recorded_calls(self.key)

    @property
    def worker_calls(self) -> list[ModelCall]:
        return recorded_calls(f"{self.key}/worker")

    def assert_strict(self, calls: Sequence[ModelCall] | None = None) -> None:
        """Every recorded request passes the strict-provider rules."""
        for index, call in enumerate(self.calls if calls is None else calls):
            problems = check_strict_request(call.messages)
            assert problems == [], f"call {index}: {problems}"
            assert call.unanswered_tool_calls() == [], f"call {index}: unanswered calls"

    def assert_single_leading_system(self, calls: Sequence[ModelCall] | None = None) -> None:
        for index, call in enumerate(self.calls if calls is None else calls):
            systems = call.system_messages
            assert len(systems) == 1 and call.messages[0] is systems[0], f"call {index}"

    async def assert_nothing_hidden_persisted(self) -> None:
        """Request-only context (date, receipt ledger, loop reminders) is not in history."""
        leaked = [(m.get("id"), hidden_kinds(m)) for m in await self.messages() if hidden_kinds(m)]
        assert leaked == []


def new_key(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
