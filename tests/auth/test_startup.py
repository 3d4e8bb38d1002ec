"""What the auth module says at server start (loudly when it will refuse everything)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from auth.authenticate import NONE_OUTSIDE_DEV, log_startup_status
from tests.auth.conftest import SECRET


def test_mode_none_under_dev(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LANGSMITH_LANGGRAPH_API_VARIANT", "local_dev")
    with caplog.at_level(logging.WARNING, logger="deerflow.auth"):
        message = log_startup_status()
    assert "mode none (langgraph dev)" in message and "'default'" in message
    assert message in caplog.text


def test_mode_none_outside_dev_is_critical(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("LANGSMITH_LANGGRAPH_API_VARIANT", raising=False)
    with caplog.at_level(logging.WARNING, logger="deerflow.auth"):
        message = log_startup_status()
    assert NONE_OUTSIDE_DEV in message
    critical = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert any(NONE_OUTSIDE_DEV in r.getMessage() for r in critical)


def test_jwt_mode_and_invalid_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, use_config: object
) -> None:
    monkeypatch.setenv("DEERFLOW_AUTH_JWT_SECRET", SECRET)
    assert log_startup_status() == "AUTH: mode jwt; Studio policy deny"
    bad = tmp_path / "bad.yaml"
    bad.write_text("auth: {mode: api_key}\n", encoding="utf-8")
    use_config(bad)  # type: ignore[operator]
    assert "every request will be refused" in log_startup_status()
