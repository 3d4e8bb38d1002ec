"""``ThreadState``: the agent state schema shared by the lead agent and subagents.

Fields beyond ``messages`` are owned by middlewares (named in each comment); they
are declared here so every graph, checkpoint and client sees one schema.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from langchain.agents import AgentState
from typing_extensions import TypedDict

from subagents.ledger import merge_delegations

__all__ = [
    "SandboxState",
    "ThreadDataState",
    "ThreadState",
    "ViewedImage",
    "last_sandbox",
    "merge_artifacts",
    "merge_viewed_images",
]


class SandboxState(TypedDict):
    """Set by SandboxMiddleware once a sandbox is acquired."""

    sandbox_id: str | None


class ThreadDataState(TypedDict, total=False):
    """Virtual and host paths of the thread (ThreadDataMiddleware)."""

    user_id: str
    thread_id: str
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


class ViewedImage(TypedDict):
    """What view_image records about an image (never its bytes)."""

    mime_type: str
    size: int
    sha256: str


def last_sandbox(existing: SandboxState | None, new: SandboxState | None) -> SandboxState | None:
    """Last write wins; a reducer so parallel first tool calls may all persist the id."""
    return new


def merge_viewed_images(
    existing: dict[str, ViewedImage] | None, new: dict[str, ViewedImage] | None
) -> dict[str, ViewedImage]:
    """Newest record per path; a re-view moves the path to the end (recency).

    Malformed values (a client can write state) are ignored, never raised on.
    """
    result = dict(existing) if isinstance(existing, dict) else {}
    for path, record in new.items() if isinstance(new, dict) else ():
        result.pop(path, None)
        result[path] = record
    return result


class ThreadState(AgentState[Any]):
    sandbox: NotRequired[Annotated[SandboxState | None, last_sandbox]]
    thread_data: NotRequired[ThreadDataState | None]
    title: NotRequired[str | None]
    artifacts: NotRequired[Annotated[list[str], merge_artifacts]]
    viewed_images: NotRequired[Annotated[dict[str, ViewedImage], merge_viewed_images]]
    # The delegation ledger (task tool + SubagentLimitMiddleware; subagents/ledger.py):
    # entries keyed by (run_id, tool_call_id), revalidated on every read.
    delegations: NotRequired[Annotated[list[dict[str, Any]], merge_delegations]]
