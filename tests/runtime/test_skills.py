"""The skill registry: front matter, both roots, warnings, allowlists."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from runtime.config import Settings
from runtime.run_options import resolve_run_options
from runtime.skills import (
    aget_skill_registry,
    effective_skill_allowlist,
    get_skill_registry,
    load_skill_registry,
    reset_skill_registry_cache,
    run_skill_allowlist,
    skill_ref_for_path,
)


def _write(root: Path, folder: str, text: str) -> None:
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / folder / "SKILL.md").write_text(text, encoding="utf-8")


def _settings(tmp_path: Path, **skills: Any) -> Settings:
    return Settings.model_validate({"skills": {"custom_path": str(tmp_path / "custom"), **skills}})


def test_public_skills_ship_valid(tmp_path: Path) -> None:
    registry = load_skill_registry(_settings(tmp_path))
    assert registry.warnings == ()
    public = {s.name for s in registry.enabled() if s.source == "public"}
    assert public == {"csv-analysis", "report-writer", "code-review"}
    for skill in registry.enabled():
        assert skill.body.strip() and skill.description
        assert any(rel.startswith("scripts/") for rel in skill.files)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no front matter\n", "must start with YAML front matter"),
        ("---\nname: x\n", "no closing '---'"),
        ("---\nname: [unclosed\n---\n", "not valid YAML"),
        ("---\n- a list\n---\n", "must be a mapping"),
        ("---\nname: Bad_Name\ndescription: d\n---\n", "lowercase letters"),
        ("---\nname: other\ndescription: d\n---\n", "must equal its folder name"),
        ("---\nname: bad\n---\n", "'description' must be a non-empty string"),
        ("---\nname: bad\ndescription: d\nallowed-tools: {a: 1}\n---\n", "list of tool names"),
        ("---\nname: bad\ndescription: d\nlicense: 3\n---\n", "'license' must be a string"),
    ],
)
def test_malformed_skill_is_skipped_with_a_warning_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, problem: str
) -> None:
    _write(tmp_path / "custom", "bad", text)
    _write(tmp_path / "custom", "good", "---\nname: good\ndescription: fine\n---\nbody\n")
    with caplog.at_level(logging.WARNING, logger="runtime.skills"):
        registry = load_skill_registry(_settings(tmp_path))
    assert registry.get("bad") is None and registry.get("good") is not None
    (warning,) = registry.warnings
    assert "custom/bad/SKILL.md" in warning and problem in warning
    assert str(tmp_path) not in warning  # shown over HTTP: no host paths
    assert any(problem in r.getMessage() for r in caplog.records)


def test_yaml_boolean_names_get_a_quoting_hint(tmp_path: Path) -> None:
    _write(tmp_path / "custom", "off", "---\nname: off\ndescription: d\n---\n")
    (warning,) = load_skill_registry(_settings(tmp_path)).warnings
    assert "quote it" in warning


def test_custom_wins_over_public_with_a_warning(tmp_path: Path) -> None:
    _write(
        tmp_path / "custom",
        "csv-analysis",
        "---\nname: csv-analysis\ndescription: Our own.\nallowed-tools: bash, read_file\n---\nx\n",
    )
    registry = load_skill_registry(_settings(tmp_path, disabled=["code-review"]))
    skill = registry.get("csv-analysis")
    assert skill is not None and skill.source == "custom" and skill.description == "Our own."
    assert skill.allowed_tools == ("bash", "read_file")
    assert skill.path == "/mnt/skills/custom/csv-analysis/SKILL.md"
    assert any("custom one" in w for w in registry.warnings)
    assert registry.resolve("code-review", None)[1].endswith("is disabled on this server")
    assert registry.resolve("report-writer", frozenset({"csv-analysis"}))[0] is None
    assert [s.name for s in registry.visible(frozenset({"csv-analysis", "code-review"}))] == [
        "csv-analysis"
    ]
    assert skill_ref_for_path(registry, "/mnt/skills/custom/csv-analysis//SKILL.md") == {
        "name": "csv-analysis",
        "path": "/mnt/skills/custom/csv-analysis/SKILL.md",
        "description": "Our own.",
    }
    assert skill_ref_for_path(registry, "/mnt/skills/public/csv-analysis/SKILL.md") is None


def test_digest_follows_content(tmp_path: Path) -> None:
    _write(tmp_path / "custom", "one", "---\nname: one\ndescription: d\n---\nv1\n")
    first = load_skill_registry(_settings(tmp_path)).digest()
    assert load_skill_registry(_settings(tmp_path)).digest() == first
    _write(tmp_path / "custom", "one", "---\nname: one\ndescription: d\n---\nv2\n")
    assert load_skill_registry(_settings(tmp_path)).digest() != first
    assert load_skill_registry(_settings(tmp_path, disabled=["one"])).digest() != first


def test_disabled_section_loads_nothing(tmp_path: Path) -> None:
    assert load_skill_registry(_settings(tmp_path, enabled=False)).skills == {}


async def test_loaded_once_off_the_loop(tmp_path: Path) -> None:
    reset_skill_registry_cache()
    settings = _settings(tmp_path)
    registry = await aget_skill_registry(settings)
    assert get_skill_registry(settings) is registry
    assert await aget_skill_registry(settings) is registry


def test_allowlists_only_narrow() -> None:
    agents = {"greeter": ["a", "b"]}
    types = {"researcher": ["b", "c"], "open": None}
    assert effective_skill_allowlist({}, agent_allowlists=agents) is None
    assert effective_skill_allowlist({"agent_name": "greeter"}, agent_allowlists=agents) == {
        "a",
        "b",
    }
    assert effective_skill_allowlist(
        {"agent_name": "greeter", "subagent_type": "researcher"},
        agent_allowlists=agents,
        type_allowlists=types,
    ) == {"b"}
    assert effective_skill_allowlist(
        {"subagent_type": "open", "skill_allowlist": ["a"]}, type_allowlists=types
    ) == {"a"}
    # A malformed caller value narrows to nothing; it never widens.
    assert effective_skill_allowlist({"skill_allowlist": 5}) == frozenset()


def test_run_options_carry_the_skill_switches(tmp_path: Path) -> None:
    options = resolve_run_options(
        {"configurable": {"skill_references": ["x"], "skill_allowlist": ["a", 3]}}  # type: ignore[typeddict-item]
    )
    assert options.skill_references == ("x",) and options.skill_allowlist == ("a",)
    assert resolve_run_options({"configurable": {"skill_references": []}}).skill_references is None
    settings = Settings.model_validate(
        {
            "skills": {"agents": {"greeter": ["a", "b"]}},
            "subagents": {
                "types": [
                    {
                        "name": "narrow",
                        "description": "d",
                        "system_prompt": "p",
                        "skills": ["b"],
                    }
                ]
            },
        }
    )
    lead = resolve_run_options({"configurable": {"agent_name": "greeter"}})
    assert run_skill_allowlist(settings, lead, subagent=False) == {"a", "b"}
    child = resolve_run_options(
        {"configurable": {"subagent_type": "narrow", "skill_allowlist": ["a", "b"]}}
    )
    assert run_skill_allowlist(settings, child, subagent=True) == {"b"}


def test_custom_path_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.config import load_settings
    from tests.support.scripted import ai_text, write_config

    _write(tmp_path / "mounted", "ours", "---\nname: ours\ndescription: From a volume.\n---\nx\n")
    monkeypatch.setenv("DEERFLOW_SKILLS_CUSTOM_PATH", str(tmp_path / "mounted"))
    settings = load_settings(write_config(tmp_path, [ai_text("x")]))
    skill = load_skill_registry(settings).get("ours")
    assert skill is not None and skill.source == "custom"
