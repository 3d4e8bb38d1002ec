"""Sandbox authorization (``sandbox:execute``) before every acquisition, on both providers.

A denied user's file and shell tools get a ``SandboxAuthorizationError`` result
and nothing is created: no thread directory (local provider), no pod (the
Kubernetes provider on the fake cluster). The same run by an allowed user does
create them, so the checks cannot pass vacuously.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from authz.provider import FailClosedAuthorizer, RolePolicyProvider
from middlewares.sandbox import SandboxMiddleware
from middlewares.tool_error_handling import ToolErrorHandlingMiddleware
from runtime.config import Settings
from runtime.scripted_model import ScriptedChatModel
from sandbox.provider import get_sandbox_provider
from tests.support.agents import make_agent
from tests.support.fake_kubernetes import kubernetes_provider, namespaces_supported
from tests.support.scripted import ai_text, ai_tools, tool_call
from tools.files import ls, write_file
from tools.sandbox import bash

AUTHORIZER = FailClosedAuthorizer(
    RolePolicyProvider(roles={"exec": ["tool:*", "sandbox:execute"], "noexec": ["tool:*"]})
)
SCRIPT = [
    ai_tools(
        tool_call("write_file", description="note", path="notes.txt", content="x"),
        tool_call("ls", description="list", path="/mnt/user-data/workspace"),
        tool_call("bash", description="list", command="ls"),
    ),
    ai_text("done"),
]


async def run(provider: Any, settings: Settings, role: str, *, eager: bool = False) -> list[Any]:
    middleware = SandboxMiddleware(
        settings, provider=provider, authorizer=AUTHORIZER, lazy_init=not eager
    )
    agent: Any = make_agent(
        ScriptedChatModel.model_validate({"script": SCRIPT}),
        [write_file, ls, bash],
        middleware=[middleware, ToolErrorHandlingMiddleware()],
    )
    user = {"identity": f"user-{role}", "roles": [role]}
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex, "langgraph_auth_user": user}}
    state = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("eager", [False, True])
async def test_local_provider_creates_nothing_for_a_denied_user(
    tmp_path: Path, eager: bool
) -> None:
    settings = Settings.model_validate({"data_root": str(tmp_path / "data")})
    provider = get_sandbox_provider(settings)
    denied = await run(provider, settings, "noexec", eager=eager)
    assert [m.status for m in denied] == ["error"] * 3
    assert all("SandboxAuthorizationError" in m.text for m in denied)
    assert not (tmp_path / "data" / "users" / "user-noexec").exists()

    allowed = await run(provider, settings, "exec", eager=eager)
    assert [m.status for m in allowed] == ["success"] * 3, [m.text for m in allowed]
    assert (tmp_path / "data" / "users" / "user-exec").exists()


_reason = namespaces_supported()


@pytest.mark.skipif(
    _reason is not None and not os.environ.get("CI"), reason=_reason or "fake exec available"
)
async def test_kubernetes_provider_creates_no_pod_for_a_denied_user(tmp_path: Path) -> None:
    settings = Settings.model_validate({"data_root": str(tmp_path / "data")})
    async with kubernetes_provider(tmp_path / "k8s", data_root=tmp_path / "data") as (
        provider,
        fake,
    ):
        denied = await run(provider, settings, "noexec")
        assert all("SandboxAuthorizationError" in m.text for m in denied)
        assert fake.pods("deerflow-sandbox") == {}
        assert fake.count("create") == 0

        allowed = await run(provider, settings, "exec")
        assert allowed[2].status == "success"
        assert len(fake.pods("deerflow-sandbox")) == 1
