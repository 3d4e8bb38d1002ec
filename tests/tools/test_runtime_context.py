"""Tools see the run's ``context`` without pydantic serializer warnings (issue 22 item 8).

A bare ``runtime: ToolRuntime`` annotation makes the tool's args schema expect
``context: None``; every tool call of a run with a context (every server run)
then logged ``PydanticSerializationUnexpectedValue ... field_name='context'``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain.tools import ToolRuntime
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel, ConfigDict, create_model

from graphs._build import build_agent
from graphs.prompts import LEAD_SYSTEM_PROMPT
from runtime.run_options import RunOptions
from subagents.limits import resolve_subagent_limits
from tests.support.sandbox_runs import make_settings, run_config
from tests.support.scripted import ai_text, ai_tools, tool_call
from tools.selection import select_tools
from tools.task import make_task_tool

CONTEXT = {"agent_name": "probe", "is_plan_mode": False, "user_id": "alice"}


def _runtime_fields(tool: Any) -> list[Any]:
    schema = tool.args_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return []
    return [
        info.annotation
        for info in schema.model_fields.values()
        if "ToolRuntime" in repr(info.annotation)
    ]


@pytest.mark.parametrize("kind", ["lead_agent", "subagent"])
def test_every_tool_serialises_a_dict_context_cleanly(tmp_path: Path, kind: Any) -> None:
    settings = make_settings(tmp_path, [ai_text("hi")])
    tools = select_tools(settings, kind=kind, model=settings.default_model)
    limits = resolve_subagent_limits(settings.subagents, RunOptions())
    tools.append(make_task_tool(settings, limits=limits, parent_model=None))
    runtime: ToolRuntime[Any, Any] = ToolRuntime(
        state={"messages": []},
        context=dict(CONTEXT),
        config={},
        stream_writer=lambda _chunk: None,
        tool_call_id="call-1",
        store=None,
    )
    checked = 0
    for tool in tools:
        for annotation in _runtime_fields(tool):
            # What langchain-core does with a tool call's input: validate, then dump.
            probe = create_model(
                "Probe",
                __config__=ConfigDict(arbitrary_types_allowed=True),
                runtime=(annotation, ...),
            )
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                probe.model_validate({"runtime": runtime}).model_dump()
            checked += 1
    assert checked >= 5  # bash, the file tools, present_files, task ...


async def test_a_tool_call_in_a_run_with_context_logs_no_serializer_warning(
    tmp_path: Path,
) -> None:
    script = [
        ai_tools(tool_call("bash", description="say hi", command="echo hi")),
        ai_text("done"),
    ]
    settings = make_settings(tmp_path, script)
    config = run_config("thread-ctx", "alice")
    graph = build_agent(settings, config, kind="lead_agent", system_prompt=LEAD_SYSTEM_PROMPT)
    graph.checkpointer = InMemorySaver()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = await graph.ainvoke(
            {"messages": [HumanMessage("go")]}, config, context=dict(CONTEXT)
        )
    tool_message = result["messages"][2]
    assert tool_message.type == "tool" and tool_message.status == "success", tool_message
    noisy = [str(w.message) for w in caught if "field_name='context'" in str(w.message)]
    assert noisy == []
