"""Spec 12 and 13 in the assembled chains, and the ``read_before_write`` config section."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from middlewares.chain import (
    ChainInputs,
    build_lead_runtime_middlewares,
    build_middlewares,
    build_subagent_runtime_middlewares,
)
from middlewares.read_before_write import ReadBeforeWriteMiddleware
from middlewares.sandbox_audit import SandboxAuditMiddleware
from runtime.config import ConfigError, Settings, get_settings, load_settings
from runtime.run_options import resolve_run_options
from tests.support.scripted import ai_text, write_config


def _inputs(settings: Settings) -> ChainInputs:
    return ChainInputs(
        settings=settings, options=resolve_run_options(None), model=settings.default_model
    )


def _kinds(chain: Sequence[object]) -> list[type]:
    return [
        type(m) for m in chain if isinstance(m, (SandboxAuditMiddleware, ReadBeforeWriteMiddleware))
    ]


def test_both_guards_in_lead_and_subagent_chains_in_spec_order() -> None:
    inputs = _inputs(get_settings())
    expected = [SandboxAuditMiddleware, ReadBeforeWriteMiddleware]
    assert _kinds(build_lead_runtime_middlewares(inputs)) == expected
    assert _kinds(build_subagent_runtime_middlewares(inputs)) == expected
    assert _kinds(build_middlewares(inputs)) == expected


def test_guards_sit_between_the_receipt_layer_and_tool_error_handling() -> None:
    """15 ToolReceipt is the outermost tool wrapper; 12 and 13 are outer of 15 ToolErrorHandling."""
    names = [type(m).__name__ for m in build_middlewares(_inputs(get_settings()))]
    audit = names.index("SandboxAuditMiddleware")
    assert names.index("ToolReceiptMiddleware") < audit
    assert audit + 1 == names.index("ReadBeforeWriteMiddleware")
    assert names.index("ReadBeforeWriteMiddleware") < names.index("ToolErrorHandlingMiddleware")
    assert names.index("LLMErrorHandlingMiddleware") < audit


def test_read_before_write_can_be_switched_off(
    tmp_path: Path, use_config: Callable[[Path], Path]
) -> None:
    use_config(write_config(tmp_path, [ai_text("hi")], read_before_write={"enabled": False}))
    inputs = _inputs(get_settings())
    assert _kinds(build_lead_runtime_middlewares(inputs)) == [SandboxAuditMiddleware]
    assert _kinds(build_subagent_runtime_middlewares(inputs)) == [SandboxAuditMiddleware]


def test_config_section_defaults_and_validation(tmp_path: Path) -> None:
    section = get_settings().read_before_write
    assert section.enabled and section.elide_blocked_payloads and section.elide_min_chars == 256
    bad = write_config(tmp_path, [ai_text("hi")], read_before_write={"elide_min_chars": -1})
    with pytest.raises(ConfigError, match=r"read_before_write\.elide_min_chars"):
        load_settings(bad)
    typo = write_config(tmp_path, [ai_text("hi")], read_before_write={"enable": True})
    with pytest.raises(ConfigError, match="unknown key"):
        load_settings(typo)


def test_env_override_switches_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, [ai_text("hi")])
    monkeypatch.setitem(os.environ, "DEERFLOW_READ_BEFORE_WRITE", "false")
    assert load_settings(path).read_before_write.enabled is False


def test_release_policy_parameters_are_json_safe() -> None:
    rbw = ReadBeforeWriteMiddleware.from_settings(get_settings())
    assert json.loads(json.dumps(rbw.release_policy_parameters()))["config"]["enabled"] is True
    audit = SandboxAuditMiddleware()
    assert json.loads(json.dumps(audit.release_policy_parameters()))["tool_names"] == ["bash"]
