"""The default data root lies outside the project tree (issue 22 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import PROJECT_ROOT, Settings, load_settings, reset_settings_cache


def test_default_is_xdg_data_home_outside_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert Settings().data_root_path() == tmp_path / "xdg" / "deerflow"


def test_without_xdg_it_is_under_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for value in (None, "", "relative/ignored"):
        if value is None:
            monkeypatch.delenv("XDG_DATA_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_DATA_HOME", value)
        root = Settings().data_root_path()
        assert root == tmp_path / "home" / ".local" / "share" / "deerflow"
        assert PROJECT_ROOT not in root.parents


def test_the_override_and_a_configured_root_still_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DEERFLOW_DATA_ROOT", str(tmp_path / "mine"))
    reset_settings_cache()
    assert load_settings().data_root_path() == tmp_path / "mine"
    assert Settings(data_root="rel").data_root_path() == PROJECT_ROOT / "rel"
