"""The skill registry: which skills exist, which are enabled, and who may use them.

A skill is a directory holding a ``SKILL.md`` whose YAML front matter names it
(``name``, ``description``, optional ``allowed-tools`` and ``license``); the
rest of the folder (scripts, references, templates) belongs to it. Two roots:
``skills.public_path`` (shipped with this repository) and
``skills.custom_path`` (the deployment's own); a custom skill wins over a
public one of the same name, with a warning. A malformed ``SKILL.md`` is a
warning that names the file, and that skill is skipped.

Everything is read once per configuration, off the event loop
(``aget_skill_registry``): the whole registry, bodies and file digests
included, is small, and later lookups (the prompt, activation, the tool
policy, ``GET /skills``) then never touch the disk.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import stat
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from runtime.paths import VIRTUAL_SKILLS

__all__ = [
    "MAX_SKILL_BYTES",
    "SKILL_FILE",
    "Skill",
    "SkillRegistry",
    "SkillSource",
    "aget_skill_registry",
    "effective_skill_allowlist",
    "get_skill_registry",
    "load_skill_registry",
    "parse_skill_md",
    "reset_skill_registry_cache",
    "run_skill_allowlist",
    "skill_ref_for_path",
]

logger = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
SkillSource = Literal["public", "custom"]
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
MAX_DESCRIPTION_CHARS = 1024
MAX_SKILL_BYTES = 10 * 1024 * 1024
"""A skill folder larger than this is skipped (it is copied into every sandbox)."""
_SKIPPED_DIRS = frozenset({"__pycache__", ".git"})


class SkillFormatError(ValueError):
    """A ``SKILL.md`` that cannot be used; the message says why."""


@dataclass(frozen=True)
class Skill:
    """One loaded skill. ``files`` maps relative paths to their bytes (the whole folder)."""

    name: str
    description: str
    source: SkillSource
    directory: Path
    body: str
    allowed_tools: tuple[str, ...] | None = None
    license: str | None = None
    enabled: bool = True
    files: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    executable: frozenset[str] = frozenset()

    @property
    def virtual_dir(self) -> str:
        return f"{VIRTUAL_SKILLS}/{self.source}/{self.name}"

    @property
    def path(self) -> str:
        """The virtual path of its ``SKILL.md`` (what the agent reads)."""
        return f"{self.virtual_dir}/{SKILL_FILE}"

    def ref(self) -> dict[str, str]:
        """The reference kept in ``skill_context``: never the body."""
        return {"name": self.name, "path": self.path, "description": self.description}

    def public_view(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "enabled": self.enabled,
            "path": self.path,
            "allowed_tools": list(self.allowed_tools) if self.allowed_tools is not None else None,
            "license": self.license,
        }


@dataclass(frozen=True)
class SkillRegistry:
    """Every skill found (enabled or not), the load warnings, and the content digest."""

    skills: Mapping[str, Skill] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def get(self, name: str) -> Skill | None:
        return self.skills.get(name)

    def enabled(self) -> list[Skill]:
        return sorted((s for s in self.skills.values() if s.enabled), key=lambda s: s.name)

    def visible(self, allowlist: frozenset[str] | None) -> list[Skill]:
        """Enabled skills the agent may use (``allowlist`` None: all enabled)."""
        return [s for s in self.enabled() if allowlist is None or s.name in allowlist]

    def resolve(self, name: str, allowlist: frozenset[str] | None) -> tuple[Skill | None, str]:
        """``(skill, "")`` if usable, else ``(None, reason)`` with a reason a user can read."""
        skill = self.skills.get(name)
        if skill is None:
            return None, f"there is no skill named {name!r}"
        if not skill.enabled:
            return None, f"the skill {name!r} is disabled on this server"
        if allowlist is not None and name not in allowlist:
            return None, f"this agent may not use the skill {name!r}"
        return skill, ""

    def by_path(self, path: str) -> Skill | None:
        """The enabled skill whose folder holds virtual ``path`` (any file in it)."""
        parts = path.split("/")
        # "", "mnt", "skills", <source>, <name>, ...
        if len(parts) < 5 or parts[0] or parts[1:3] != ["mnt", "skills"]:
            return None
        skill = self.skills.get(parts[4])
        if skill is None or not skill.enabled or skill.source != parts[3]:
            return None
        return skill

    def digest(self) -> str:
        """A content hash of the enabled skills: the projection's version."""
        h = hashlib.sha256()
        for skill in self.enabled():
            h.update(f"{skill.source}/{skill.name}\x00".encode())
            for rel in sorted(skill.files):
                h.update(rel.encode() + b"\x00")
                h.update(b"x" if rel in skill.executable else b"-")
                h.update(hashlib.sha256(skill.files[rel]).digest())
        return h.hexdigest()[:32]


def parse_skill_md(text: str, where: str) -> tuple[dict[str, Any], str]:
    """``(front matter, body)`` of a ``SKILL.md``; raises ``SkillFormatError``."""
    if not text.startswith("---"):
        raise SkillFormatError(f"{where}: SKILL.md must start with YAML front matter ('---')")
    lines = text.splitlines(keepends=True)
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise SkillFormatError(f"{where}: the front matter has no closing '---' line")
    try:
        meta = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise SkillFormatError(f"{where}: the front matter is not valid YAML ({exc})") from None
    if not isinstance(meta, dict):
        raise SkillFormatError(f"{where}: the front matter must be a mapping")
    return meta, "".join(lines[end + 1 :]).lstrip("\n")


def _validate(
    meta: dict[str, Any], where: str, folder: str
) -> tuple[str, str, tuple[str, ...] | None, str | None]:
    name = meta.get("name")
    if isinstance(name, bool | int | float):
        raise SkillFormatError(
            f"{where}: 'name' was read as {name!r} by YAML; quote it (name: \"{folder}\")"
        )
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SkillFormatError(
            f"{where}: 'name' must be lowercase letters, digits and '-' (got {name!r})"
        )
    if name != folder:
        raise SkillFormatError(f"{where}: 'name' {name!r} must equal its folder name {folder!r}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillFormatError(f"{where}: 'description' must be a non-empty string")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillFormatError(f"{where}: 'description' is longer than {MAX_DESCRIPTION_CHARS}")
    tools = meta.get("allowed-tools")
    allowed: tuple[str, ...] | None = None
    if tools is not None:
        if isinstance(tools, str):
            tools = [t for t in re.split(r"[,\s]+", tools) if t]
        if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
            raise SkillFormatError(f"{where}: 'allowed-tools' must be a list of tool names")
        allowed = tuple(dict.fromkeys(tools))
    license_ = meta.get("license")
    if license_ is not None and not isinstance(license_, str):
        raise SkillFormatError(f"{where}: 'license' must be a string")
    return name, " ".join(description.split()), allowed, license_


def _read_folder(directory: Path, where: str) -> tuple[dict[str, bytes], frozenset[str]]:
    files: dict[str, bytes] = {}
    executable: set[str] = set()
    total = 0
    for current, dirs, names in os.walk(directory, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        for name in sorted(names):
            full = Path(current) / name
            info = full.lstat()
            rel = full.relative_to(directory).as_posix()
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
                logger.warning("skill %s: %s is not a regular file; it is left out", where, rel)
                continue
            if name.endswith((".pyc", ".pyo")):
                continue
            total += info.st_size
            if total > MAX_SKILL_BYTES:
                raise SkillFormatError(
                    f"{where}: the folder is larger than {MAX_SKILL_BYTES} bytes"
                )
            files[rel] = full.read_bytes()
            if info.st_mode & stat.S_IXUSR:
                executable.add(rel)
    return files, frozenset(executable)


def _load_root(
    root: Path, source: SkillSource, disabled: frozenset[str], max_body: int, warnings: list[str]
) -> dict[str, Skill]:
    found: dict[str, Skill] = {}
    if not root.is_dir():
        return found
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir() or folder.is_symlink():
            continue
        skill_md = folder / SKILL_FILE
        where = f"{source}/{folder.name}/{SKILL_FILE}"  # shown over HTTP: no host path
        if not skill_md.is_file():
            continue
        try:
            meta, body = parse_skill_md(skill_md.read_text(encoding="utf-8"), where)
            name, description, allowed, license_ = _validate(meta, where, folder.name)
            files, executable = _read_folder(folder, where)
        except (SkillFormatError, OSError, UnicodeDecodeError) as exc:
            if isinstance(exc, SkillFormatError):
                message = str(exc)
            elif isinstance(exc, OSError):
                message = f"{where}: {exc.strerror or type(exc).__name__}"
            else:
                message = f"{where}: not UTF-8 text"
            warnings.append(f"skill skipped: {message}")
            logger.debug("skill file with the problem: %s", skill_md)
            continue
        if len(body) > max_body:
            body = body[:max_body] + "\n\n[... SKILL.md cut at the configured limit ...]\n"
        found[name] = Skill(
            name=name,
            description=description,
            source=source,
            directory=folder,
            body=body,
            allowed_tools=allowed,
            license=license_,
            enabled=name not in disabled,
            files=files,
            executable=executable,
        )
    return found


def _root_path(value: str) -> Path:
    from runtime.config import PROJECT_ROOT

    path = Path(value).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path


def load_skill_registry(settings: Any) -> SkillRegistry:
    """Read both roots. Blocking: call off the event loop (``aget_skill_registry``)."""
    section = settings.skills
    if not section.enabled:
        return SkillRegistry()
    disabled = frozenset(section.disabled)
    warnings: list[str] = []
    public = _load_root(
        _root_path(section.public_path), "public", disabled, section.max_body_chars, warnings
    )
    custom = _load_root(
        _root_path(section.custom_path), "custom", disabled, section.max_body_chars, warnings
    )
    for name in sorted(set(public) & set(custom)):
        warnings.append(f"skill {name!r} exists in both roots; the custom one (custom/{name}) wins")
    merged = {**public, **custom}
    for message in warnings:
        logger.warning(
            "%s (public root %s, custom root %s)", message, section.public_path, section.custom_path
        )
    return SkillRegistry(skills=dict(sorted(merged.items())), warnings=tuple(warnings))


_cache: dict[str, SkillRegistry] = {}
_lock = threading.Lock()


def _key(settings: Any) -> str:
    return str(settings.skills.model_dump_json())


def get_skill_registry(settings: Any) -> SkillRegistry:
    """The registry of this configuration, loaded on first use (blocking then only)."""
    key = _key(settings)
    registry = _cache.get(key)
    if registry is None:
        with _lock:
            registry = _cache.get(key)
            if registry is None:
                registry = load_skill_registry(settings)
                _cache[key] = registry
    return registry


async def aget_skill_registry(settings: Any) -> SkillRegistry:
    """Async twin: the first load runs in a worker thread."""
    registry = _cache.get(_key(settings))
    if registry is not None:
        return registry
    return await asyncio.to_thread(get_skill_registry, settings)


def reset_skill_registry_cache() -> None:
    """Forget loaded registries (tests, and reloads after skills changed on disk)."""
    with _lock:
        _cache.clear()


def _names(value: Any) -> frozenset[str]:
    """A caller- or config-given name list; anything malformed narrows to nothing."""
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list | tuple | set | frozenset):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


def effective_skill_allowlist(
    values: Mapping[str, Any],
    *,
    agent_allowlists: Mapping[str, Iterable[str]] | None = None,
    type_allowlists: Mapping[str, Iterable[str] | None] | None = None,
) -> frozenset[str] | None:
    """Which skills a run may use: None means every enabled skill.

    Each source can only narrow: the named agent's list (``skills.agents``),
    the subagent type's ``skills``, and ``skill_allowlist`` in the run's
    context (how a subagent inherits its parent's list; a caller who sets it
    only restricts themselves).
    """
    result: frozenset[str] | None = None

    def narrow(names: frozenset[str]) -> None:
        nonlocal result
        result = names if result is None else result & names

    agent = values.get("agent_name")
    if isinstance(agent, str) and agent_allowlists and agent in agent_allowlists:
        narrow(_names(list(agent_allowlists[agent])))
    subagent_type = values.get("subagent_type")
    if isinstance(subagent_type, str) and type_allowlists:
        type_list = type_allowlists.get(subagent_type)
        if type_list is not None:
            narrow(_names(list(type_list)))
    if "skill_allowlist" in values and values["skill_allowlist"] is not None:
        narrow(_names(values["skill_allowlist"]))
    return result


def skill_ref_for_path(registry: SkillRegistry, path: Any) -> dict[str, str] | None:
    """The ``skill_context`` reference if ``path`` is an enabled skill's ``SKILL.md``."""
    if not isinstance(path, str):
        return None
    normalized = "/" + "/".join(p for p in path.split("/") if p not in ("", "."))
    skill = registry.by_path(normalized)
    if skill is None or normalized != skill.path:
        return None
    return skill.ref()


def run_skill_allowlist(settings: Any, options: Any, *, subagent: bool) -> frozenset[str] | None:
    """``effective_skill_allowlist`` for a run's ``RunOptions`` (lead or subagent)."""
    values: dict[str, Any] = {
        "agent_name": options.agent_name,
        "skill_allowlist": options.skill_allowlist,
    }
    if subagent:
        values["subagent_type"] = options.subagent_type or "general-purpose"
    return effective_skill_allowlist(
        values,
        agent_allowlists=settings.skills.agents,
        type_allowlists={t.name: t.skills for t in settings.subagents.types},
    )
