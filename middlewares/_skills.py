"""What SkillActivation (18) and SkillToolPolicy (19) share: who activated which skill.

- ``find_activation`` reads the latest *real* user message (no server
  provenance) for strict ``/skill-name task`` syntax, and the run's inline
  ``skill_references``; both resolve through the live registry and the run's
  allowlist, all or nothing.
- ``SkillChannel``: 18 publishes the activation and 19 its tool decision,
  run-scoped and process-private (never in the run's context, state or
  stream, so neither forgeable nor observable); a missing or stale entry
  falls back to live resolution.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage

from middlewares._prefix_fold import prefix_latest
from middlewares._text import content_text
from middlewares.input_sanitization import ORIGINAL_USER_CONTENT_KEY, is_genuine_user_message
from runtime.skills import Skill, SkillRegistry

__all__ = [
    "ACTIVATION_CONTEXT_KEY",
    "ACTIVATION_MARKER_KEY",
    "FRAMEWORK_SAFE_TOOLS",
    "MAX_SKILL_REFERENCES",
    "PLAIN_TURN",
    "POLICY_CONTEXT_KEY",
    "Activation",
    "SkillChannel",
    "find_activation",
    "latest_user_message",
    "parse_slash",
]

ACTIVATION_CONTEXT_KEY = "__skill_activation"
ACTIVATION_MARKER_KEY = "deerflow_skill_activation"
"""On the request-only activation block: ``{source, names, paths}`` for SkillToolPolicy."""
POLICY_CONTEXT_KEY = "__skill_tool_policy"
MAX_SKILL_REFERENCES = 16
FRAMEWORK_SAFE_TOOLS = frozenset({"tool_search", "describe_skill"})
_SLASH = re.compile(r"^/([a-z0-9][a-z0-9-]{0,63})(?:\s+(.*))?$", re.DOTALL)
_SLASH_TOKEN = re.compile(r"^/(\S+)")


@dataclass(frozen=True)
class Activation:
    """A run's explicit activation: resolved skills, or why it was refused."""

    source: str  # "slash" | "references"
    names: tuple[str, ...]
    task: str
    message_id: str | None
    skills: tuple[Skill, ...] = ()
    error: str | None = None

    @property
    def paths(self) -> list[str]:
        return [s.path for s in self.skills]


_latest_user = prefix_latest(is_genuine_user_message)


def latest_user_message(messages: Sequence[Any]) -> tuple[int, HumanMessage] | None:
    """The newest message the caller wrote, with its index (resumed per history)."""
    _, index = _latest_user(messages)
    return (index, messages[index]) if index >= 0 else None


def user_text(message: HumanMessage) -> str:
    original = (message.additional_kwargs or {}).get(ORIGINAL_USER_CONTENT_KEY)
    return original if isinstance(original, str) else content_text(message.content)


def parse_slash(text: str) -> tuple[str, str] | None:
    """``(name, task)`` for strict ``/skill-name task``; None when it is not that syntax.

    The first token after ``/`` must be a whole skill-shaped name: ``/usr/bin``
    or ``/ hello`` are ordinary text, ``/unknown do X`` is an activation attempt.
    """
    stripped = text.strip()
    token = _SLASH_TOKEN.match(stripped)
    if token is None:
        return None
    match = _SLASH.match(stripped)
    if match is None or match.group(1) != token.group(1):
        return None
    return match.group(1), (match.group(2) or "").strip()


def find_activation(
    messages: Sequence[Any],
    references: Sequence[Any] | None,
    registry: SkillRegistry | None,
    allowlist: frozenset[str] | None,
) -> Activation | None:
    """The run's activation (resolved or refused), or None for a plain turn."""
    found = latest_user_message(messages)
    message = found[1] if found else None
    text = user_text(message) if message is not None else ""
    message_id = message.id if message is not None else None
    if references:
        names_raw = list(references)
        if len(names_raw) > MAX_SKILL_REFERENCES:
            return Activation(
                "references",
                (),
                text,
                message_id,
                error=f"at most {MAX_SKILL_REFERENCES} skill_references are accepted "
                f"(got {len(names_raw)})",
            )
        bad = [n for n in names_raw if not isinstance(n, str) or not n]
        if bad:
            return Activation(
                "references",
                (),
                text,
                message_id,
                error=f"skill_references must be skill names (got {bad[0]!r})",
            )
        names = tuple(dict.fromkeys(names_raw))
        return _resolve("references", names, text, message_id, registry, allowlist)
    if message is None:
        return None
    parsed = parse_slash(text)
    if parsed is None:
        return None
    name, task = parsed
    return _resolve("slash", (name,), task, message_id, registry, allowlist)


def _resolve(
    source: str,
    names: tuple[str, ...],
    task: str,
    message_id: str | None,
    registry: SkillRegistry | None,
    allowlist: frozenset[str] | None,
) -> Activation:
    if registry is None:
        return Activation(source, names, task, message_id, error="skills could not be loaded")
    skills: list[Skill] = []
    for name in names:
        skill, reason = registry.resolve(name, allowlist)
        if skill is None:
            return Activation(source, names, task, message_id, error=reason)
        skills.append(skill)
    return Activation(source, names, task, message_id, skills=tuple(skills))


class SkillChannel:
    """Where 18 publishes an activation for 19, and 19 its decision for its tool hook.

    Run-scoped and process-private: entries are keyed by (key, thread:run) and
    never enter the run's context, state or stream, so a caller can neither
    forge nor observe them. Without a known run id nothing is stored and the
    readers resolve live. ``SkillChannel.shared()`` is the one assembled chains use.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self._max = max_entries
        self._store: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def shared(cls) -> SkillChannel:
        return _SHARED

    @staticmethod
    def _usable(run: str) -> bool:
        return bool(run) and "-" not in run.split(":")

    def publish(self, key: str, run: str, value: object) -> None:
        """Keep ``value`` (an immutable object) for ``run``; nothing without a run id."""
        if not self._usable(run):
            return
        with self._lock:
            self._store.pop((key, run), None)
            self._store[(key, run)] = value
            while len(self._store) > self._max:
                self._store.popitem(last=False)

    def read(self, key: str, run: str) -> object | None:
        if not self._usable(run):
            return None
        with self._lock:
            return self._store.get((key, run))


PLAIN_TURN = object()
"""Published by SkillActivation when the run activates nothing."""

_SHARED = SkillChannel()
