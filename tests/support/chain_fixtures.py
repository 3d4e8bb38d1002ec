"""Helpers to assemble chains in tests: probe factories for every spec slot, inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from middlewares.chain import (
    BASE_SLOTS,
    LEAD_SLOTS,
    LEAD_TAIL_SLOTS,
    SUBAGENT_SLOTS,
    SUBAGENT_TAIL_SLOTS,
    ChainInputs,
    Factory,
)
from runtime.config import Settings, load_settings
from runtime.run_options import resolve_run_options
from tests.support.probes import probe
from tests.support.scripted import write_config

__all__ = ["ALL_SLOT_NAMES", "inputs_for", "probe_factories"]

ALL_SLOT_NAMES = tuple(
    dict.fromkeys(
        s.name
        for s in (*BASE_SLOTS, *LEAD_SLOTS, *LEAD_TAIL_SLOTS, *SUBAGENT_SLOTS, *SUBAGENT_TAIL_SLOTS)
    )
)

_MODEL_WRAPPERS = {
    "InputSanitizationMiddleware",
    "LLMErrorHandlingMiddleware",
    "DanglingToolCallMiddleware",
    "SystemMessageCoalescingMiddleware",
    "ModelContentCompatibilityMiddleware",
}
_TOOL_WRAPPERS = {
    "ToolOutputBudgetMiddleware",
    "ToolResultSanitizationMiddleware",
    "ToolReceiptMiddleware",
    "SandboxAuditMiddleware",
    "ToolErrorHandlingMiddleware",
    "ClarificationMiddleware",
}


def probe_factories(log: list[str] | None = None) -> dict[str, Factory]:
    """A factory for every slot, building a probe named after the slot.

    The probes of the spec's model-boundary and tool-boundary middlewares wrap
    that axis, so the placement anchors and invariants behave as with the real ones.
    """
    sink = log if log is not None else []

    def factory_for(name: str) -> Factory:
        def make(inputs: ChainInputs) -> AgentMiddleware[Any, Any]:
            wraps = [
                w
                for w, names in (("model", _MODEL_WRAPPERS), ("tool", _TOOL_WRAPPERS))
                if name in names
            ]
            return probe(name, sink, hooks=("before_model", "after_model"), wraps=wraps)

        return make

    return {name: factory_for(name) for name in ALL_SLOT_NAMES}


def inputs_for(
    tmp_path: Path,
    *,
    configurable: dict[str, Any] | None = None,
    models: list[dict[str, Any]] | None = None,
    **sections: Any,
) -> ChainInputs:
    """ChainInputs from a real config file and run config, as graphs/_build.py makes them."""
    path = write_config(
        tmp_path,
        [{"content": "hi"}],
        models=models,
        filename=f"config-{len(list(tmp_path.glob('config-*.yaml')))}.yaml",
        **sections,
    )
    settings: Settings = load_settings(path)
    options = resolve_run_options({"configurable": configurable or {}})
    model = settings.model_by_name(options.model_name or "") or settings.default_model
    effective = options.effective(subagents_default=settings.subagents.enabled)
    return ChainInputs(settings=settings, options=options, model=model, effective=effective)
