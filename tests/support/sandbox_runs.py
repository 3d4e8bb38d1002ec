"""Run real lead/subagent graphs (scripted model, real chain, real tools) in tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from graphs._build import build_agent
from graphs.prompts import LEAD_SYSTEM_PROMPT, SUBAGENT_SYSTEM_PROMPT
from runtime.config import Settings, load_settings
from tests.support.scripted import write_config

__all__ = ["make_settings", "run_agent", "tool_messages"]


def make_settings(directory: Path, script: list[dict[str, Any]], **sections: Any) -> Settings:
    return load_settings(write_config(directory, script, **sections))


def run_config(
    thread_id: str | None, user: str | None, run_id: str | None = None
) -> RunnableConfig:
    configurable: dict[str, Any] = {}
    if thread_id is not None:
        configurable["thread_id"] = thread_id
    if user is not None:
        configurable["langgraph_auth_user_id"] = user
    config: RunnableConfig = {"configurable": configurable}
    if run_id is not None:
        config["run_id"] = run_id  # type: ignore[typeddict-item]
    return config


async def run_agent(
    settings: Settings,
    input_: Any,
    *,
    thread_id: str | None = "thread-1",
    user: str | None = "alice",
    kind: Literal["lead_agent", "subagent"] = "lead_agent",
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    run_id: str | None = None,
    tools: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Build the agent like the server does and run it once (async)."""
    config = run_config(thread_id, user, run_id)
    prompt = LEAD_SYSTEM_PROMPT if kind == "lead_agent" else SUBAGENT_SYSTEM_PROMPT
    graph = build_agent(settings, config, kind=kind, system_prompt=prompt, tools=tools)
    if thread_id is not None:  # a checkpointer needs a thread
        graph.checkpointer = checkpointer if checkpointer is not None else InMemorySaver()
    if isinstance(input_, str):
        input_ = {"messages": [HumanMessage(input_)]}
    result = await graph.ainvoke(input_, config)
    assert isinstance(result, dict)
    return result


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    messages: list[BaseMessage] = result["messages"]
    return [m for m in messages if isinstance(m, ToolMessage)]
