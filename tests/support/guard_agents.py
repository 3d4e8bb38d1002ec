"""Build real ``create_agent`` graphs (scripted model) for the guard-middleware tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph

from runtime.scripted_model import ScriptedChatModel
from runtime.state import ThreadState

__all__ = ["RecordingMiddleware", "make_agent", "run_config", "tool_messages"]


class RecordingMiddleware(AgentMiddleware[Any, Any, Any]):
    """Records every model-bound message list it sees (register it inner to the tested one)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[list[BaseMessage]] = []

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        self.requests.append(list(request.messages))
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        self.requests.append(list(request.messages))
        return await handler(request)


def make_agent(
    script: list[dict[str, Any]],
    *,
    tools: Sequence[BaseTool],
    middleware: Sequence[AgentMiddleware[Any, Any, Any]],
) -> CompiledStateGraph[Any, Any, Any, Any]:
    return create_agent(
        ScriptedChatModel.model_validate({"script": script}),
        list(tools),
        middleware=list(middleware),
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )


def run_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]
