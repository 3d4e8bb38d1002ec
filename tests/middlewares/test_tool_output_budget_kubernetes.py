"""Big tool outputs under the Kubernetes provider (fake cluster): readable where read_file runs.

Issue 19.7: ToolOutputBudget wrote externalised outputs on the API host while
``read_file`` runs in the pod. Now the output is written through the sandbox
when its files are not the host's, and falls back inline when that fails.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from middlewares.sandbox import SandboxMiddleware
from middlewares.tool_output_budget import ToolOutputBudgetMiddleware, tool_output_filename
from middlewares.tool_output_synopsis import describe_output
from runtime.config import load_settings
from runtime.state import ThreadState
from tests.support.fake_kubernetes import kubernetes_provider, namespaces_supported
from tests.support.scripted import write_config
from tests.support.strict_provider import StrictRecordingModel
from tests.support.tools import echo
from tools.files import read_file

_reason = namespaces_supported()
if _reason is not None:
    if os.environ.get("CI"):
        raise RuntimeError(_reason)
    pytestmark = pytest.mark.skip(reason=_reason)

BIG = "".join(f"row {i}: value {i * 7}\n" for i in range(3000))
OUTPUT = f"echo: {BIG}"


def _path() -> str:
    ext = describe_output(OUTPUT).extension
    return f"/mnt/user-data/outputs/.tool-results/{tool_output_filename('echo', 'call_0_0', OUTPUT, ext)}"


async def _run(tmp_path: Path, provider: Any) -> tuple[list[ToolMessage], StrictRecordingModel]:
    settings = await asyncio.to_thread(
        lambda: load_settings(write_config(tmp_path, [{"content": "unused"}]))
    )
    model = StrictRecordingModel.model_validate(
        {
            "script": [
                {"tool_calls": [{"name": "echo", "args": {"text": BIG}}]},
                {
                    "tool_calls": [
                        {
                            "name": "read_file",
                            "args": {
                                "description": "d",
                                "path": _path(),
                                "start_line": 2000,
                                "end_line": 2001,
                            },
                        }
                    ]
                },
                {"content": "done"},
            ]
        }
    )
    agent = create_agent(
        model,
        [echo, read_file],
        middleware=[
            ToolOutputBudgetMiddleware(
                settings.tool_output,
                data_root=settings.data_root_path(),
                settings=settings,
                provider=provider,
            ),
            SandboxMiddleware(settings, provider=provider),
        ],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    config: RunnableConfig = {
        "configurable": {"thread_id": "big-1", "langgraph_auth_user_id": "alice"}
    }
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    return [m for m in result["messages"] if isinstance(m, ToolMessage)], model


async def test_externalised_output_is_readable_in_the_pod(tmp_path: Path) -> None:
    async with kubernetes_provider(tmp_path) as (provider, _fake):
        (synopsis, read), _ = await _run(tmp_path, provider)
    assert _path() in synopsis.text and len(synopsis.text) < len(OUTPUT) // 4
    assert synopsis.additional_kwargs["deerflow_tool_output"]["virtual_path"] == _path()
    assert read.status != "error", read.text
    assert read.text == "row 1999: value 13993\nrow 2000: value 14000\n"
    # Nothing was written on the API host, where the agent cannot read it.
    host = tmp_path / "data"
    assert not any(p.name == ".tool-results" for p in host.rglob("*")) if host.exists() else True


async def test_a_failed_sandbox_write_falls_back_inline(tmp_path: Path) -> None:
    async with kubernetes_provider(tmp_path) as (provider, _fake):

        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise OSError("disk full")

        original = provider.get

        def get(sandbox_id: str) -> Any:
            sandbox = original(sandbox_id)
            if sandbox is not None:
                sandbox.upload_bytes = refuse  # type: ignore[method-assign]
            return sandbox

        provider.get = get  # type: ignore[method-assign]
        (fallback, _read), _ = await _run(tmp_path, provider)
    # Under the inline-fallback cap the whole output stays inline; no dangling path.
    assert fallback.text == OUTPUT
    assert ".tool-results" not in fallback.text
    assert "deerflow_tool_output" not in fallback.additional_kwargs


async def test_history_over_budget_stays_inline_when_files_are_in_the_pod(tmp_path: Path) -> None:
    """Model side: an old oversized result is never pointed at a host file the pod lacks."""
    from langchain_core.messages import AIMessage

    async with kubernetes_provider(tmp_path) as (provider, _fake):
        settings = await asyncio.to_thread(
            lambda: load_settings(write_config(tmp_path, [{"content": "unused"}]))
        )
        sandbox_id = await provider.acquire("hist-1", user_id="alice")
        model = StrictRecordingModel.model_validate(
            {"script": [{"content": "-"}, {"content": "ok"}]}
        )
        agent = create_agent(
            model,
            [echo],
            middleware=[
                ToolOutputBudgetMiddleware(
                    settings.tool_output,
                    data_root=settings.data_root_path(),
                    settings=settings,
                    provider=provider,
                )
            ],
            state_schema=ThreadState,
            checkpointer=InMemorySaver(),
        )
        history = [
            HumanMessage("go"),
            AIMessage(
                "", tool_calls=[{"name": "echo", "args": {}, "id": "old", "type": "tool_call"}]
            ),
            ToolMessage(OUTPUT, tool_call_id="old", name="echo"),
        ]
        config: RunnableConfig = {
            "configurable": {"thread_id": "hist-1", "langgraph_auth_user_id": "alice"}
        }
        inputs: Any = {"messages": history, "sandbox": {"sandbox_id": sandbox_id}}
        await agent.ainvoke(inputs, config)
    (sent,) = [m for m in model.requests[-1] if isinstance(m, ToolMessage)]
    assert ".tool-results" not in sent.text and "could not be saved" in sent.text
    assert len(sent.text) <= settings.tool_output.max_chars + 1000
