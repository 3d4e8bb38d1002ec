"""Memory tools for ``memory.mode: tool``: the agent saves, finds and deletes memories itself.

They act on the calling user's own memories only (``resolve_runtime_user_id``
from the run, never an argument), through the same store records as automatic
extraction, so ``GET /memory`` lists what they saved. Errors are tool results,
never failed runs.
"""

from __future__ import annotations

from langchain.tools import ToolRuntime
from langchain_core.tools import tool

from auth.identity import resolve_runtime_user_id
from memory.records import CATEGORIES, add_memory, delete_memory, search_memories
from runtime.config import get_settings

__all__ = ["memory_delete", "memory_save", "memory_search"]

_NO_STORE = "Error: long-term memory is not available on this server (no store)."


def _semantic() -> bool:
    settings = get_settings()
    return settings.memory.embeddings is not None


@tool("memory_save", parse_docstring=True)
async def memory_save(content: str, category: str, runtime: ToolRuntime) -> str:
    """Remember a durable fact about the user for future conversations.

    Args:
        content: One sentence stating the fact, e.g. "Prefers metric units."
        category: One of preference, fact, decision, project, other.
    """
    if runtime.store is None:
        return _NO_STORE
    settings = get_settings().memory
    text = " ".join(content.split())[: settings.max_memory_chars]
    if not text:
        return "Error: content is empty; say what to remember."
    if category not in CATEGORIES:
        return f"Error: category must be one of {', '.join(CATEGORIES)}."
    memory_id = await add_memory(
        runtime.store,
        resolve_runtime_user_id(runtime),
        text,
        category=category,
        confidence=0.9,
        indexed=settings.embeddings is not None,
    )
    return f"Saved memory {memory_id}."


@tool("memory_search", parse_docstring=True)
async def memory_search(query: str, runtime: ToolRuntime) -> str:
    """Search what you remember about the user.

    Args:
        query: Words to look for, e.g. "units" or "project deadline".
    """
    if runtime.store is None:
        return _NO_STORE
    found = await search_memories(
        runtime.store, resolve_runtime_user_id(runtime), query, limit=10, semantic=_semantic()
    )
    if not found:
        return "No memories found."
    return "\n".join(f"{m.id} [{m.category}] {m.content}" for m in found)


@tool("memory_delete", parse_docstring=True)
async def memory_delete(memory_id: str, runtime: ToolRuntime) -> str:
    """Forget one memory (use the id that memory_search shows).

    Args:
        memory_id: The memory's id.
    """
    if runtime.store is None:
        return _NO_STORE
    if await delete_memory(runtime.store, resolve_runtime_user_id(runtime), memory_id):
        return f"Deleted memory {memory_id}."
    return f"Error: no memory with id {memory_id!r}."
