"""``ThreadState``: the agent state schema shared by the lead agent and subagents.

Fields beyond ``messages`` are owned by middlewares (named in each comment); they
are declared here so every graph, checkpoint and client sees one schema.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents import AgentState

from subagents.ledger import merge_delegations

__all__ = ["SandboxState", "ThreadDataState", "ThreadState", "merge_artifacts"]


class SandboxState(TypedDict):
    """Set by SandboxMiddleware once a sandbox is acquired."""

    sandbox_id: str | None


class ThreadDataState(TypedDict, total=False):
    """Virtual and host paths of the thread (ThreadDataMiddleware)."""

    user_id: str
    workspace_path: str
    uploads_path: str
    outputs_path: str


def merge_artifacts(existing: list[str] | None, new: list[str] | None) -> list[str]:
    """Union of presented files, first-seen order kept (present_files)."""
    result = list(existing or [])
    for item in new or []:
        if item not in result:
            result.append(item)
    return result


class ThreadState(AgentState[Any]):
    sandbox: NotRequired[SandboxState | None]
    thread_data: NotRequired[ThreadDataState | None]
    title: NotRequired[str | None]
    artifacts: NotRequired[Annotated[list[str], merge_artifacts]]
    # The delegation ledger (task tool + SubagentLimitMiddleware; subagents/ledger.py):
    # entries keyed by (run_id, tool_call_id), revalidated on every read.
    delegations: NotRequired[Annotated[list[dict[str, Any]], merge_delegations]]
