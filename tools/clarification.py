"""``ask_clarification``: the agent asks the user and the run pauses for the answer.

The tool body only runs when ClarificationMiddleware is absent (a bare graph);
in the assembled chain the middleware intercepts the call before execution and
turns it into a pause with a structured payload: a LangGraph interrupt that a
resume answers (the model then goes on with the answer as the tool result), or
the end of the run (``clarification.mode: end``). Which of the two decides
whether the tool is ``return_direct``: create_agent ends the loop after a
``return_direct`` tool, which the end mode needs and the interrupt mode must
not have (the model goes on with the answer). The graph builder passes the
configured mode through ``for_clarification_mode``.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.tools import BaseTool, tool

__all__ = ["ask_clarification", "for_clarification_mode"]

ClarificationType = Literal[
    "missing_info", "ambiguous_requirement", "approach_choice", "risk_confirmation", "suggestion"
]


@tool("ask_clarification")
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


def for_clarification_mode(tool: BaseTool, mode: str) -> BaseTool:
    """``tool`` as the clarification mode needs it (``return_direct`` only for ``end``)."""
    if tool.name != "ask_clarification" or tool.return_direct == (mode == "end"):
        return tool
    return tool.model_copy(update={"return_direct": mode == "end"})
