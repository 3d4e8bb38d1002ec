"""What SkillActivation (18) and SkillToolPolicy (19) share: who activated which skill.

- ``find_activation`` reads the latest *real* user message (no server
  provenance) for strict ``/skill-name task`` syntax, and the run's inline
  ``skill_references``; both resolve through the live registry and the run's
  allowlist, all or nothing.
- ``SkillChannel`` is the token both middlewares of one assembled chain share:
  18 publishes the activation and 19 its tool decision into the run's context
  under ``__``-prefixed keys (which the auth layer strips from caller input),
  each signed with that token, so a value the caller or another chain wrote
  is never trusted; an unsigned, foreign or stale value falls back to live
  resolution.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage

from middlewares._text import content_text
from middlewares.input_sanitization import ORIGINAL_USER_CONTENT_KEY, is_genuine_user_message
from runtime.skills import Skill, SkillRegistry

__all__ = [
    "ACTIVATION_CONTEXT_KEY",
    "ACTIVATION_MARKER_KEY",
    "FRAMEWORK_SAFE_TOOLS",
    "MAX_SKILL_REFERENCES",
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


def latest_user_message(messages: Sequence[Any]) -> tuple[int, HumanMessage] | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if is_genuine_user_message(message):
            return index, message
    return None


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


@dataclass
class SkillChannel:
    """The private token that authenticates 18 → 19 and 19 → its tool hook.

    ``SkillChannel.shared()`` is the one the assembled chains of this process
    use: the token never leaves the process and is known to no caller.
    """

    token: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @classmethod
    def shared(cls) -> SkillChannel:
        return _SHARED

    def _sign(self, key: str, run: str, payload: Mapping[str, Any]) -> str:
        body = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
        return hmac.new(
            self.token, f"{key}\x00{run}\x00{body}".encode(), hashlib.sha256
        ).hexdigest()

    def publish(self, context: Any, key: str, run: str, payload: Mapping[str, Any]) -> None:
        """Store a signed, JSON-safe copy in the run context (when it is a mutable dict)."""
        if not isinstance(context, dict):
            return
        context[key] = {
            "v": 1,
            "run": run,
            "payload": dict(payload),
            "sig": self._sign(key, run, payload),
        }

    def read(self, context: Any, key: str, run: str) -> dict[str, Any] | None:
        """The payload if it is ours, for this run, and untouched; else None."""
        if not isinstance(context, Mapping):
            return None
        value = context.get(key)
        if not isinstance(value, Mapping) or value.get("v") != 1 or value.get("run") != run:
            return None
        payload, sig = value.get("payload"), value.get("sig")
        if not isinstance(payload, Mapping) or not isinstance(sig, str):
            return None
        if not hmac.compare_digest(sig, self._sign(key, run, payload)):
            return None
        return dict(payload)


_SHARED = SkillChannel()
