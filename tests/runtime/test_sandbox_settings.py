"""The ``sandbox``, ``uploads`` and ``tool_groups`` config sections and the state fields they feed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.config import ConfigError, Settings, load_settings
from runtime.state import ViewedImage, last_sandbox, merge_viewed_images
from tests.support.scripted import ai_text, write_config


def test_defaults_are_the_documented_ones() -> None:
    settings = Settings()
    section = settings.sandbox
    assert section.use == "sandbox.local:LocalSandboxProvider"
    assert section.lazy_init and section.thread_dirs_lazy_init and section.allow_host_bash
    assert section.command_timeout_seconds == 300
    assert section.max_output_bytes == 131072
    assert settings.uploads.max_file_bytes == 50 * 1024 * 1024
    assert settings.uploads.max_files == 20
    assert settings.tool_groups.for_kind("lead_agent") is None
    assert settings.tool_groups.for_kind("subagent") == ["sandbox", "files", "vision", "web", "mcp"]


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"sandbox": {"allow_bash": True}}, "sandbox.allow_bash: unknown key"),
        ({"sandbox": {"command_timeout_seconds": 0}}, "sandbox.command_timeout_seconds"),
        ({"sandbox": {"max_output_bytes": 10}}, "sandbox.max_output_bytes"),
        ({"uploads": {"max_files": 0}}, "uploads.max_files"),
        ({"tool_groups": {"planner": ["files"]}}, "tool_groups.planner: unknown key"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, sections: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write_config(tmp_path, [ai_text("x")], **sections))


def test_environment_switches_host_bash_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEERFLOW_SANDBOX_ALLOW_HOST_BASH", "false")
    assert not load_settings(write_config(tmp_path, [ai_text("x")])).sandbox.allow_host_bash


def test_state_reducers_tolerate_bad_values() -> None:
    assert last_sandbox({"sandbox_id": "a"}, {"sandbox_id": "b"}) == {"sandbox_id": "b"}
    record: ViewedImage = {"mime_type": "image/png", "size": 1, "sha256": "x"}
    merged = merge_viewed_images({"/a": record, "/b": record}, {"/a": record})
    assert list(merged) == ["/b", "/a"], "a re-view moves to the end"
    assert merge_viewed_images(None, {"/a": record}) == {"/a": record}
    assert merge_viewed_images({"/a": record}, "junk") == {"/a": record}  # type: ignore[arg-type]
    assert merge_viewed_images("junk", None) == {}  # type: ignore[arg-type]
