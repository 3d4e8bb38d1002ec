"""Helpers for delegation tests: configs with a lead and worker models, and runs."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from graphs.lead_agent import build_lead_agent
from runtime.config import Settings, load_settings
from tests.support.scripted import scripted_model_entry, write_config

__all__ = [
    "TEST_TOOLS",
    "LeadRun",
    "delegation_config",
    "run_lead",
    "task_call",
]

TEST_TOOLS: list[dict[str, str]] = [
    {"name": "echo", "group": "test", "use": "tests.support.tools:echo"},
    {"name": "gate", "group": "test", "use": "tests.support.subagent_tools:gate"},
    {"name": "hang", "group": "test", "use": "tests.support.subagent_tools:hang"},
    {"name": "whoami", "group": "test", "use": "tests.support.subagent_tools:whoami"},
]


def task_call(
    prompt: str, *, subagent_type: str = "general-purpose", description: str | None = None
) -> dict[str, Any]:
    return {
        "name": "task",
        "args": {
            "description": description or prompt[:30],
            "prompt": prompt,
            "subagent_type": subagent_type,
        },
    }


def delegation_config(
    directory: Path,
    lead: list[dict[str, Any]],
    worker: list[dict[str, Any]] | None = None,
    *,
    extra_models: list[dict[str, Any]] | None = None,
    tools: list[dict[str, str]] | None = None,
    auth: dict[str, Any] | None = None,
    **subagents: Any,
) -> Path:
    """A config whose default model ``lead`` plays ``lead`` and ``worker`` plays ``worker``.

    The built-in types use ``worker`` (``subagents.model``) unless overridden.
    """
    models = [scripted_model_entry(lead, name="lead")]
    models.append(scripted_model_entry(worker or [{"content": "worker done"}], name="worker"))
    models.extend(extra_models or [])
    sections: dict[str, Any] = {"subagents": {"model": "worker", **subagents}}
    if auth is not None:
        sections["auth"] = auth
    return write_config(
        directory, models=models, tools=TEST_TOOLS if tools is None else tools, **sections
    )


@dataclass
class LeadRun:
    values: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)

    def events_of(self, task_id: str) -> list[str]:
        return [e["type"] for e in self.events if e.get("task_id") == task_id]

    def tool_messages(self) -> list[Any]:
        return [m for m in self.values["messages"] if m.type == "tool"]


async def run_lead(
    settings: Settings | Path,
    text: str = "go",
    *,
    thread_id: str | None = None,
    run_id: str | None = None,
    checkpointer: InMemorySaver | None = None,
    configurable: dict[str, Any] | None = None,
    state: dict[str, Any] | None = None,
    events: list[dict[str, Any]] | None = None,
    recursion_limit: int | None = None,
) -> LeadRun:
    """One lead-agent run through a real ``create_agent`` graph, collecting custom events."""
    if isinstance(settings, Path):
        settings = load_settings(settings)
    config_values = {
        "thread_id": thread_id or str(uuid.uuid4()),
        "run_id": run_id or str(uuid.uuid4()),
        **(configurable or {}),
    }
    config: dict[str, Any] = {"configurable": config_values}
    if recursion_limit is not None:
        config["recursion_limit"] = recursion_limit
    graph = build_lead_agent(settings, config)  # type: ignore[arg-type]
    graph.checkpointer = checkpointer or InMemorySaver()
    events = [] if events is None else events
    values: dict[str, Any] = {}
    inputs: dict[str, Any] = {"messages": [{"role": "user", "content": text}], **(state or {})}
    async for mode, chunk in graph.astream(  # type: ignore[call-overload]
        inputs, config, stream_mode=["custom", "values"]
    ):
        if mode == "custom":
            events.append(chunk)
        else:
            values = chunk
    return LeadRun(values=values, events=events)


def streaming_client(app: Any, *, headers: dict[str, str] | None = None) -> Any:
    """A ``langgraph_sdk`` client over the server's streaming ASGI transport.

    ``httpx.ASGITransport`` buffers whole responses, so live custom events only
    arrive through the server's own transport (the one ``get_client`` uses).
    """
    import httpx
    from langgraph_api.asgi_transport import ASGITransport
    from langgraph_sdk.client import LangGraphClient

    http = httpx.AsyncClient(
        transport=ASGITransport(app=app),
        base_url="http://deerflow.test",
        headers=dict(headers or {}),
        timeout=60,
    )
    return LangGraphClient(http)
