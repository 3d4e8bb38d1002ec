"""Studio's forms: ``/assistants/{id}/schemas`` through a real server (issue 22 item 1)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from runtime.run_options import RUN_SWITCHES, SUBAGENT_SWITCHES, RunOptions

pytestmark = pytest.mark.server

SWITCHES = {
    "model_name",
    "is_plan_mode",
    "subagent_enabled",
    "thinking_enabled",
    "max_concurrent_subagents",
    "max_total_subagents",
    "agent_name",
}


@pytest.mark.parametrize("graph_id", ["lead_agent", "subagent"])
async def test_both_graphs_publish_every_schema(lg_client: Any, graph_id: str) -> None:
    client = lg_client()
    [assistant] = await client.assistants.search(graph_id=graph_id, limit=1)
    schemas = await client.assistants.get_schemas(assistant["assistant_id"])
    for key in ("input_schema", "output_schema", "state_schema", "context_schema"):
        assert schemas[key] is not None, (key, schemas)
    assert "messages" in schemas["input_schema"]["properties"]
    assert "messages" in schemas["state_schema"]["properties"]
    context = schemas["context_schema"]["properties"]
    assert set(context) >= SWITCHES, sorted(context)
    for name in SWITCHES:
        assert context[name].get("description"), name
        assert "default" in context[name], name
    assert context["is_plan_mode"]["default"] is False
    assert ("subagent_type" in context) == (graph_id == "subagent")


def test_every_run_option_is_a_declared_switch() -> None:
    """The server drops context keys the schema does not name: a switch read by
    ``resolve_run_options`` but missing from ``RUN_SWITCHES`` would never arrive."""
    declared = {switch.name for switch in RUN_SWITCHES + SUBAGENT_SWITCHES}
    read = {field.name for field in dataclasses.fields(RunOptions)} - {"thread_id"}
    assert read <= declared


async def test_a_declared_switch_reaches_the_graph_through_context(lg_client: Any) -> None:
    """Behaviour, not just the table: with the schema in place the server still
    delivers a switch set in ``context`` (it filters by the schema's keys)."""
    client = lg_client()
    thread = await client.threads.create()
    await client.runs.wait(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": "hello"}]},
        context={"agent_name": "schema-probe", "is_plan_mode": True},
    )
    state = await client.threads.get_state(thread["thread_id"])
    assert state["metadata"]["agent_name"] == "schema-probe"
    assert state["metadata"]["is_plan_mode"] is True
