"""Build real agents with the project's assembled chain around a given model instance.

Tests that need to look at what the model received pass a model object (a
``StrictRecordingModel``) instead of a config entry; everything else is the
production path: ``build_middlewares`` / ``build_subagent_runtime_middlewares``
from config, ``create_agent`` with ``ThreadState`` and a checkpointer.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph

from middlewares.chain import ChainInputs, build_middlewares
from runtime.config import ModelConfig, Settings
from runtime.run_options import resolve_run_options
from runtime.state import ThreadState

__all__ = ["chain_for", "make_agent", "run_config", "settings_for"]


def chain_for(
    settings: Settings, *, model_name: str = "scripted"
) -> list[AgentMiddleware[Any, Any]]:
    """The lead chain assembled from ``settings``."""
    options = resolve_run_options(None)
    entry = ModelConfig(name=model_name, use="runtime.scripted_model:ScriptedChatModel")
    inputs = ChainInputs(settings=settings, options=options, model=entry, effective={})
    return build_middlewares(inputs)


def make_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    settings: Settings | None = None,
    middleware: Sequence[AgentMiddleware[Any, Any]] | None = None,
    system_prompt: str = "You are a test agent.",
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A real ``create_agent`` graph with the assembled chain (or ``middleware``)."""
    chain = list(middleware) if middleware is not None else chain_for(settings or Settings())
    return create_agent(
        model,
        list(tools),
        system_prompt=system_prompt,
        middleware=chain,
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )


def run_config(thread_id: str | None = None, *, user_id: str = "alice") -> RunnableConfig:
    """A run config with a thread and an authenticated user, as the server sets them."""
    return {
        "configurable": {
            "thread_id": thread_id or f"t-{uuid.uuid4().hex[:12]}",
            "langgraph_auth_user_id": user_id,
        }
    }


def settings_for(data_root: Any = None, **sections: Any) -> Settings:
    """Settings from plain dicts (validated like a config file), data under ``data_root``."""
    data: dict[str, Any] = dict(sections)
    if data_root is not None:
        data["data_root"] = str(data_root)
    return Settings.model_validate(data)
