"""``ThreadState``: the agent state schema shared by the lead agent and subagents.

Fields beyond ``messages`` are owned by middlewares (named in each comment); they
are declared here so every graph, checkpoint and client sees one schema.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from langchain.agents import AgentState
from typing_extensions import TypedDict

from runtime.delegations import merge_delegations

__all__ = [
    "SandboxState",
    "ThreadDataState",
    "ThreadState",
    "ViewedImage",
    "last_sandbox",
    "merge_artifact_handles",
    "merge_artifacts",
    "merge_run_usage",
    "merge_skill_context",
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


def merge_artifact_handles(
    existing: dict[str, dict[str, Any]] | None, new: dict[str, dict[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """Handle -> artifact record (ArtifactCaptureMiddleware, docs/artifacts.md); newest wins.

    Malformed values (a client can write state) are ignored, never raised on.
    """
    result = dict(existing) if isinstance(existing, dict) else {}
    for handle, record in new.items() if isinstance(new, dict) else ():
        if isinstance(handle, str) and isinstance(record, dict):
            result[handle] = record
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


MAX_SKILL_CONTEXT = 32


def merge_skill_context(
    existing: list[dict[str, str]] | None, new: list[dict[str, str]] | None
) -> list[dict[str, str]]:
    """Skill references ``{name, path, description}``, one per name, newest last.

    A re-read moves the skill to the end (recency); the list keeps the newest
    ``MAX_SKILL_CONTEXT`` entries. Never bodies: an entry with other keys is
    trimmed to these three, and a malformed one (a client can write state) is
    skipped, never raised on.
    """
    result: dict[str, dict[str, str]] = {}
    for source in (existing, new):
        for item in source if isinstance(source, list) else ():
            if not isinstance(item, dict):
                continue
            name, path = item.get("name"), item.get("path")
            if not isinstance(name, str) or not name or not isinstance(path, str):
                continue
            description = item.get("description")
            result.pop(name, None)
            result[name] = {
                "name": name,
                "path": path,
                "description": description if isinstance(description, str) else "",
            }
    return list(result.values())[-MAX_SKILL_CONTEXT:]


_MAX_USAGE_RUNS = 64


def merge_run_usage(existing: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    """Per-run token usage (TokenUsageMiddleware): a run's entry is replaced whole,
    the newest ``_MAX_USAGE_RUNS`` runs are kept; malformed values are ignored."""
    result = dict(existing) if isinstance(existing, dict) else {}
    for run_id, usage in new.items() if isinstance(new, dict) else ():
        if isinstance(run_id, str) and isinstance(usage, dict):
            result.pop(run_id, None)
            result[run_id] = usage
    while len(result) > _MAX_USAGE_RUNS:
        result.pop(next(iter(result)))
    return result


def merge_promoted(existing: dict[str, str] | None, new: dict[str, str] | None) -> dict[str, str]:
    """Promoted deferred tools: name -> hash of the schema that was promoted (newest wins)."""
    result = dict(existing) if isinstance(existing, dict) else {}
    for name, digest in new.items() if isinstance(new, dict) else ():
        if isinstance(name, str) and isinstance(digest, str):
            result[name] = digest
    return result


class ThreadState(AgentState[Any]):
    sandbox: NotRequired[Annotated[SandboxState | None, last_sandbox]]
    thread_data: NotRequired[ThreadDataState | None]
    title: NotRequired[str | None]
    artifacts: NotRequired[Annotated[list[str], merge_artifacts]]
    viewed_images: NotRequired[Annotated[dict[str, ViewedImage], merge_viewed_images]]
    # Deferred tools promoted by tool_search (name -> schema hash; spec 29).
    promoted: NotRequired[Annotated[dict[str, str], merge_promoted]]
    # Artifact handles (ArtifactCaptureMiddleware 16, resolved by ArtifactResolution 10).
    artifact_handles: NotRequired[Annotated[dict[str, dict[str, Any]], merge_artifact_handles]]
    # The delegation ledger (task tool + SubagentLimitMiddleware; subagents/ledger.py):
    # entries keyed by (run_id, tool_call_id), revalidated on every read.
    delegations: NotRequired[Annotated[list[dict[str, Any]], merge_delegations]]
    # Skills loaded in this thread (SkillActivation/SkillToolPolicy write it on
    # activation and on reads of a SKILL.md; DurableContext projects it).
    skill_context: NotRequired[Annotated[list[dict[str, str]], merge_skill_context]]
    # Token usage per run id, written at run end (TokenUsageMiddleware, 23).
    token_usage: NotRequired[Annotated[dict[str, Any], merge_run_usage]]
