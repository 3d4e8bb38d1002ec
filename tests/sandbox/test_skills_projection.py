"""The enabled skills appear read-only at /mnt/skills in both providers (Kubernetes: fake cluster)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from graphs.lead_agent import build_lead_agent
from runtime.config import load_settings
from runtime.skills import get_skill_registry, reset_skill_registry_cache
from sandbox.base import SandboxError
from sandbox.local import LocalSandboxProvider
from sandbox.provider import get_sandbox_provider, reset_sandbox_providers
from sandbox.skills import PodSkills, materialize_projection, pod_skills_source, skills_archive
from tests.support.fake_kubernetes import fake_cluster, kubernetes_provider, namespaces_supported
from tests.support.scripted import ai_text, ai_tools, tool_call, write_config

SKILL = "---\nname: {name}\ndescription: The {name} skill.\n---\nBody of {name}.\n"


def _settings(tmp_path: Path, **sandbox: Any) -> Any:
    custom = tmp_path / "custom"
    for name in ("my-skill", "off-skill"):
        (custom / name / "scripts").mkdir(parents=True)
        (custom / name / "SKILL.md").write_text(SKILL.format(name=name), encoding="utf-8")
    script = custom / "my-skill" / "scripts" / "run.sh"
    script.write_text("#!/bin/sh\necho ran-my-skill\n", encoding="utf-8")
    script.chmod(0o755)
    reset_skill_registry_cache()
    return load_settings(
        write_config(
            tmp_path,
            [ai_text("x")],
            skills={"custom_path": str(custom), "disabled": ["off-skill"]},
            sandbox=sandbox,
        )
    )


def test_projection_holds_enabled_skills_read_only(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    registry = get_skill_registry(settings)
    root = materialize_projection(registry, tmp_path / "data")
    assert materialize_projection(registry, tmp_path / "data") == root  # once per digest
    skill_md = root / "custom" / "my-skill" / "SKILL.md"
    assert skill_md.read_text(encoding="utf-8").startswith("---\nname: my-skill")
    assert (root / "public" / "csv-analysis" / "scripts" / "analyze_csv.py").is_file()
    assert not (root / "custom" / "off-skill").exists()
    assert stat.S_IMODE(skill_md.stat().st_mode) == 0o444
    assert (
        stat.S_IMODE((root / "custom" / "my-skill" / "scripts" / "run.sh").stat().st_mode) == 0o555
    )
    assert stat.S_IMODE((root / "custom" / "my-skill").stat().st_mode) == 0o555
    leftovers = [p.name for p in root.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


async def test_local_provider_projects_skills_and_refuses_writes(tmp_path: Path) -> None:
    settings = await asyncio.to_thread(_settings, tmp_path)
    provider = LocalSandboxProvider.from_settings(settings)
    assert provider.skills_dir is None and provider.skills_projection is not None
    sandbox = provider.get(await provider.acquire("t1", user_id="alice"))
    assert sandbox is not None
    body = await sandbox.read_file("/mnt/skills/custom/my-skill/SKILL.md")
    assert "Body of my-skill." in body
    custom = "\n".join(await sandbox.list_dir("/mnt/skills/custom"))
    assert "/mnt/skills/custom/my-skill/SKILL.md" in custom and "off-skill" not in custom
    with pytest.raises(SandboxError, match="read-only"):
        await sandbox.write_file("/mnt/skills/custom/my-skill/planted.md", "x")
    result = await sandbox.execute_command("/mnt/skills/custom/my-skill/scripts/run.sh")
    assert result.exit_code == 0 and "ran-my-skill" in result.output


def test_an_explicit_skills_dir_is_shown_as_is(tmp_path: Path) -> None:
    settings = _settings(tmp_path, skills_dir=str(tmp_path / "custom"))
    provider = LocalSandboxProvider.from_settings(settings)
    assert provider.skills_dir == tmp_path / "custom" and provider.skills_projection is None


k8s_reason = namespaces_supported()


@pytest.mark.skipif(k8s_reason is not None, reason=k8s_reason or "")
async def test_kubernetes_pod_gets_a_read_only_copy_once(tmp_path: Path) -> None:
    settings = await asyncio.to_thread(_settings, tmp_path)
    async with kubernetes_provider(tmp_path / "k8s", skills=pod_skills_source(settings)) as (
        provider,
        fake,
    ):
        sandbox_id = await provider.acquire("t1", user_id="alice")
        sandbox = provider.get(sandbox_id)
        assert sandbox is not None
        body = await sandbox.read_file("/mnt/skills/custom/my-skill/SKILL.md")
        assert "Body of my-skill." in body
        assert "analyze_csv.py" in "\n".join(
            await sandbox.list_dir("/mnt/skills/public/csv-analysis", max_depth=2)
        )
        custom = "\n".join(await sandbox.list_dir("/mnt/skills/custom"))
        assert "/mnt/skills/custom/my-skill/SKILL.md" in custom and "off-skill" not in custom
        with pytest.raises(SandboxError, match="read-only"):
            await sandbox.write_file("/mnt/skills/custom/my-skill/planted.md", "x")
        modes = await sandbox.execute_command(
            "stat -c '%a %n' /mnt/skills/custom/my-skill/SKILL.md "
            "/mnt/skills/custom/my-skill /mnt/skills/custom/my-skill/scripts/run.sh"
        )
        assert modes.output.split("\n")[:3] == [
            "444 /mnt/skills/custom/my-skill/SKILL.md",
            "555 /mnt/skills/custom/my-skill",
            "555 /mnt/skills/custom/my-skill/scripts/run.sh",
        ]
        ran = await sandbox.execute_command("/mnt/skills/custom/my-skill/scripts/run.sh")
        assert "ran-my-skill" in ran.output
        # A second acquire of the same pod copies nothing again.
        await provider.release(sandbox_id)
        fake.reset_counts()
        await provider.acquire("t1", user_id="alice")
        assert fake.count("exec") == 0
        listing = await sandbox.execute_command("ls -a /mnt/skills")
        assert ".deerflow-skills-digest" in listing.output
        assert ".staging" not in listing.output  # the unpack left nothing behind


@pytest.mark.skipif(k8s_reason is not None, reason=k8s_reason or "")
async def test_lead_agent_on_kubernetes_sees_the_custom_skill(tmp_path: Path) -> None:
    """From config to pod: the provider built from settings copies the skills in."""
    async with fake_cluster(tmp_path / "cluster") as fake:
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", namespace="deerflow-sandbox")
        script = [
            ai_tools(
                tool_call(
                    "bash",
                    description="look",
                    command="cat /mnt/skills/custom/my-skill/SKILL.md; ls /mnt/skills/custom",
                )
            ),
            ai_tools(
                tool_call(
                    "write_file",
                    description="plant",
                    path="/mnt/skills/custom/my-skill/planted.md",
                    content="x",
                )
            ),
            ai_text("done"),
        ]

        def setup() -> Any:
            reset_sandbox_providers()
            settings = _settings(
                tmp_path,
                use="sandbox.kubernetes:KubernetesSandboxProvider",
                kubernetes={"kubeconfig": str(kubeconfig), "namespace": "deerflow-sandbox"},
            )
            settings = settings.model_copy(
                update={"models": [settings.models[0].model_copy(update={"script": script})]}
            )
            get_skill_registry(settings)
            return settings

        settings = await asyncio.to_thread(setup)
        config: Any = {"configurable": {"thread_id": "k8s-skills"}}
        provider = get_sandbox_provider(settings)
        try:
            result = await build_lead_agent(settings, config).ainvoke(
                {"messages": [HumanMessage("show me my skill")]}, config
            )
        finally:
            await provider.aclose()  # type: ignore[attr-defined]
            reset_sandbox_providers()
        bash, write = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert "Body of my-skill." in bash.text and "off-skill" not in bash.text
        assert write.status == "error" and "read-only" in write.text


@pytest.mark.skipif(k8s_reason is not None, reason=k8s_reason or "")
async def test_kubernetes_pod_copy_is_replaced_when_the_skills_change(tmp_path: Path) -> None:
    def first_registry() -> PodSkills:
        registry = get_skill_registry(_settings(tmp_path / "a"))
        return PodSkills("digest-a", skills_archive(registry))

    first = await asyncio.to_thread(first_registry)

    def second_registry() -> PodSkills:
        (tmp_path / "b" / "custom" / "new-skill").mkdir(parents=True)
        (tmp_path / "b" / "custom" / "new-skill" / "SKILL.md").write_text(
            SKILL.format(name="new-skill"), encoding="utf-8"
        )
        reset_skill_registry_cache()
        settings = load_settings(
            write_config(
                tmp_path / "b",
                [ai_text("x")],
                skills={"custom_path": str(tmp_path / "b" / "custom")},
            )
        )
        return PodSkills("digest-b", skills_archive(get_skill_registry(settings)))

    second = await asyncio.to_thread(second_registry)
    current = {"payload": first}
    async with kubernetes_provider(tmp_path / "k8s", skills=lambda: current["payload"]) as (
        provider,
        _fake,
    ):
        sandbox_id = await provider.acquire("t1", user_id="alice")
        sandbox = provider.get(sandbox_id)
        assert sandbox is not None
        assert "/mnt/skills/custom/my-skill/" in await sandbox.list_dir("/mnt/skills/custom")
        await provider.release(sandbox_id)
        current["payload"] = second
        await provider.acquire("t1", user_id="alice")
        listing = "\n".join(await sandbox.list_dir("/mnt/skills/custom"))
        assert "/mnt/skills/custom/new-skill/SKILL.md" in listing and "my-skill" not in listing
        marker = await sandbox.read_file("/mnt/skills/.deerflow-skills-digest")
        assert marker == "digest-b"
