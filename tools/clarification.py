"""``ask_clarification``: the agent asks the user and the run pauses for the answer.

It is ``return_direct``: a turn whose only call is this question ends the run.
The tool body only runs when ClarificationMiddleware is absent (a bare graph);
in the assembled chain the middleware intercepts the call before execution and
turns it into a run-level pause with a structured payload.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.tools import tool

__all__ = ["ask_clarification"]

ClarificationType = Literal[
    "missing_info", "ambiguous_requirement", "approach_choice", "risk_confirmation", "suggestion"
]


@tool("ask_clarification", return_direct=True)
def ask_clarification(
    question: str,
    clarification_type: ClarificationType = "missing_info",
    context: str | None = None,
    options: list[str] | None = None,
    fields: list[dict[str, Any]] | None = None,
) -> str:
    """Ask the user a question and wait for the answer before going on.

    Use it when a requirement is missing or ambiguous, when you must choose
    between approaches the user cares about, or before a risky action. Give
    `options` for a choice, or `fields` (name, label, type: text, textarea,
    select, multiselect, checkbox or number; options for selects) for a short form.
    Do not call other tools in the same turn: they will not run.
    """
    lines = [question]
    if context:
        lines.append(f"Context: {context}")
    for index, option in enumerate(options or [], start=1):
        lines.append(f"{index}. {option}")
    return "\n".join(lines)
