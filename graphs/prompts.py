"""System prompts of the lead agent and the subagents."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.skills import Skill
from subagents.types import SUBAGENT_SYSTEM_PROMPT

__all__ = ["LEAD_SYSTEM_PROMPT", "SUBAGENT_SYSTEM_PROMPT", "skills_prompt_section"]

LEAD_SYSTEM_PROMPT = """\
You are DeerFlow, a capable general-purpose agent. You work in a sandboxed
workspace at /mnt/user-data/workspace; files the user uploads are in
/mnt/user-data/uploads, and deliverables go to /mnt/user-data/outputs.
Plan before you act, use your tools to verify facts, read a file before you
change it, and finish with a clear answer that says what you did.
"""


def skills_prompt_section(skills: Sequence[Skill]) -> str:
    """The skills the agent may use, by name and description (progressive disclosure).

    Only names, descriptions and paths: a body is read on demand with
    ``read_file``, or injected for one turn when the user types ``/name``.
    """
    if not skills:
        return ""
    lines = [
        "",
        "<skills>",
        "Skills are folders of instructions and scripts for specific kinds of work. When a "
        "task matches a skill, read its SKILL.md with read_file first and follow it; its "
        "other files sit next to it. Skill folders are read-only: write results to "
        "/mnt/user-data/outputs or the workspace.",
    ]
    for skill in skills:
        lines.append(f"- {skill.name}: {' '.join(skill.description.split())} ({skill.path})")
    lines.append("</skills>")
    return "\n".join(lines) + "\n"
