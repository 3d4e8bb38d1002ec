"""``tool_search``: find deferred tools by name and description, and promote them.

With ``tool_search.enabled``, deferred tools (MCP tools, tools marked
``deferred``) are hidden from the model (DeferredToolFilterMiddleware) until
promoted. This tool searches that catalog (built per agent, so it holds only
tools this agent has, after authorization filtered them) and promotes the best
matches into ``ThreadState.promoted`` (name -> schema hash), where the filter
finds them on the next model call of this thread.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.types import Command
from pydantic import BaseModel, Field

from tools.deferred import schema_hash

__all__ = ["TOOL_SEARCH_NAME", "make_tool_search", "rank_tools"]

TOOL_SEARCH_NAME = "tool_search"
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower().replace("_", " ")))


def rank_tools(catalog: Sequence[BaseTool], query: str, limit: int) -> list[BaseTool]:
    """Tools whose name or description shares words with ``query``, best first."""
    wanted = _words(query)
    scored = []
    for position, tool in enumerate(catalog):
        name_words = _words(tool.name)
        score = 3 * len(wanted & name_words) + len(wanted & _words(tool.description or ""))
        if tool.name.lower() in query.lower():
            score += 5
        if score:
            scored.append((-score, position, tool))
    return [tool for _, _, tool in sorted(scored, key=lambda item: item[:2])[:limit]]


class _Args(BaseModel):
    query: str = Field(description="What the tool should do, or its name, e.g. 'weather forecast'")


def make_tool_search(catalog: Sequence[BaseTool], *, max_results: int = 5) -> BaseTool:
    """A ``tool_search`` over ``catalog`` (the agent's deferred tools)."""
    tools = list(catalog)

    async def search(query: str, runtime: ToolRuntime) -> Command[Any]:
        found = rank_tools(tools, query, max_results)
        call_id = runtime.tool_call_id or ""
        if not found:
            text = (
                f"No tool matches {query!r}. Available tools were searched by name and description."
            )
            return Command(update={"messages": [ToolMessage(text, tool_call_id=call_id)]})
        lines = [f"- {t.name}: {(t.description or '').strip()[:200]}" for t in found]
        text = "These tools are now available; call them directly:\n" + "\n".join(lines)
        return Command(
            update={
                "promoted": {t.name: schema_hash(t) for t in found},
                "messages": [ToolMessage(text, tool_call_id=call_id, name=TOOL_SEARCH_NAME)],
            }
        )

    return StructuredTool.from_function(
        coroutine=search,
        name=TOOL_SEARCH_NAME,
        description=(
            "Find more tools. Some tools are hidden until you search for them: describe "
            f"what you need, and up to {max_results} matching tools become callable."
        ),
        args_schema=_Args,
        metadata={"deerflow_tool_search": True},
    )
