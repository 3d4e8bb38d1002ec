"""Odd content shapes through the whole assembled chain (issue 19.4).

Providers and clients send legal JSON that is not the usual shape: block
``type`` values that are lists or objects (unhashable), blocks without a type,
non-string text, bare strings. Every middleware that reads content blocks
meets them here, in history and in model responses, on the lead chain with
every optional middleware on and on the subagent chain: none may raise, and
the request still satisfies a strict provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from middlewares.chain import ChainInputs, build_middlewares, build_subagent_runtime_middlewares
from runtime.config import ModelConfig
from runtime.run_options import resolve_run_options
from runtime.state import ThreadState
from tests.support.agents import run_config, settings_for
from tests.support.scenarios import ALL_OPTIONAL
from tests.support.strict_provider import StrictRecordingModel, check_strict_request
from tests.support.tools import echo

ODD_BLOCKS: list[Any] = [
    {"type": [], "text": "list type"},
    {"type": {}, "text": "object type"},
    {"type": {"nested": ["x"]}},
    {"text": "no type at all"},
    {"type": "text", "text": 5},
    {"type": "text"},
    "a bare string block",
    {"type": "image_url"},
    {"type": "tool_use", "id": [], "name": {}},
    {"type": "text", "text": "readable text"},
]


# A response's text blocks hold strings (langchain-core joins them into .text).
RESPONSE_BLOCKS = [b for b in ODD_BLOCKS if b != {"type": "text", "text": 5}]


def _history() -> list[Any]:
    return [
        HumanMessage(content=list(ODD_BLOCKS), id="h1"),
        AIMessage(
            content=list(ODD_BLOCKS),
            tool_calls=[{"name": "echo", "args": {"text": "x"}, "id": "c1", "type": "tool_call"}],
            id="a1",
        ),
        ToolMessage(content=list(ODD_BLOCKS), tool_call_id="c1", name="echo", id="t1"),
        AIMessage(content=list(ODD_BLOCKS), id="a2"),
        HumanMessage(content=[*ODD_BLOCKS, {"type": "text", "text": "and now?"}], id="h2"),
    ]


SCRIPT: list[dict[str, Any]] = [
    {"content": "(history)"},  # the scripted model picks its turn by AI messages seen
    {"content": "(history)"},
    {"content": list(RESPONSE_BLOCKS), "tool_calls": [{"name": "echo", "args": {"text": "y"}}]},
    {"content": list(RESPONSE_BLOCKS)},
]


def _inputs(tmp_path: Path) -> ChainInputs:
    settings = settings_for(tmp_path / "data", **ALL_OPTIONAL)
    return ChainInputs(
        settings=settings,
        options=resolve_run_options({"configurable": {"is_plan_mode": True}}),
        model=ModelConfig(name="scripted", use="runtime.scripted_model:ScriptedChatModel"),
        effective={"subagent_enabled": True, "is_plan_mode": True},
    )


@pytest.mark.parametrize("chain", ["lead", "subagent"])
async def test_odd_shapes_never_crash_the_assembled_chain(tmp_path: Path, chain: str) -> None:
    inputs = _inputs(tmp_path)
    middleware = (
        build_middlewares(inputs) if chain == "lead" else build_subagent_runtime_middlewares(inputs)
    )
    # Every middleware that reads content blocks is in this chain.
    names = {type(m).__name__ for m in middleware}
    assert {
        "InputSanitizationMiddleware",
        "PiiRedactionMiddleware",
        "LoopDetectionMiddleware",
        "TerminalResponseMiddleware",
        "ModelLengthFinishReasonMiddleware",
        "SafetyFinishReasonMiddleware",
        "ModelContentCompatibilityMiddleware",
        "SystemMessageCoalescingMiddleware",
        "ToolReceiptMiddleware",
    } <= names
    if chain == "lead":
        assert {"SubagentLimitMiddleware", "TitleMiddleware", "ClarificationMiddleware"} <= names
    model = StrictRecordingModel.model_validate({"script": SCRIPT})
    agent = create_agent(
        model,
        [echo],
        system_prompt="odd shapes",
        middleware=middleware,
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    result = await agent.ainvoke({"messages": _history()}, run_config())
    assert isinstance(result["messages"][-1], AIMessage)
    assert len(model.requests) == 2, "both calls reached the model (no error fallback)"
    for request in model.requests:
        assert check_strict_request(request) == []
    # The readable text survives every rewrite on the way to the model.
    assert any("readable text" in str(m.content) for m in model.requests[-1])
