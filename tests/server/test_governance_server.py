"""Governance through the real in-process server in jwt mode: tools, models, sandbox, guardrails.

What the model is offered is read from the recording model; what ran is read
from the thread's state; what was decided from the custom stream events.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import ToolMessage

from auth.tokens import mint_token
from runtime.recording_model import recorded_calls
from tests.support.scripted import ai_text, ai_tools, recording_model_entry, tool_call, write_config
from tests.support.server import RequestScopedASGITransport

pytestmark = pytest.mark.server

SECRET = "governance-secret-" + "g" * 40
ROLES = {
    "admin": ["*"],
    "intern": [
        "tool:read_file",
        "tool:ls",
        "tool:task",
        "model:small",
        "model:worker",
        "sandbox:execute",
    ],
    "noexec": ["tool:*", "model:*"],
}


def bearer(sub: str, *roles: str) -> dict[str, str]:
    token = mint_token(SECRET, sub, extra_claims={"roles": list(roles)})
    return {"Authorization": f"Bearer {token}"}


def governed_config(
    directory: Path,
    *,
    big: list[dict[str, Any]] | None = None,
    small: list[dict[str, Any]] | None = None,
    worker: list[dict[str, Any]] | None = None,
    fail_closed: bool = False,
    rules: list[dict[str, Any]] | None = None,
    execution: str = "inprocess",
) -> tuple[Path, dict[str, str]]:
    keys = {name: f"{name}-{uuid.uuid4().hex}" for name in ("big", "small", "worker")}
    models = [
        recording_model_entry(big or [ai_text("big answered")], key=keys["big"], name="big"),
        recording_model_entry(
            small or [ai_text("small answered")], key=keys["small"], name="small"
        ),
        recording_model_entry(
            worker or [ai_text("worker done")], key=keys["worker"], name="worker"
        ),
    ]
    path = write_config(
        directory,
        models=models,
        data_root=str(directory / "data"),
        auth={"mode": "jwt", "jwt": {"secret": SECRET}},
        authorization={
            "enabled": True,
            "roles": ROLES,
            "default_role": "intern",
            "fail_closed": fail_closed,
        },
        guardrails={
            "enabled": True,
            "rules": rules
            if rules is not None
            else [{"tool": "bash", "deny_pattern": r"rm\s+-rf", "reason": "no recursive deletes"}],
        },
        subagents={"enabled": True, "model": "worker", "execution": execution},
    )
    return path, keys


async def run_streamed(
    client: Any, *, context: dict[str, Any] | None = None, text: str = "go"
) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    thread = await client.threads.create()
    events: list[dict[str, Any]] = []
    values: dict[str, Any] = {}
    async for part in client.runs.stream(
        thread["thread_id"],
        "lead_agent",
        input={"messages": [{"role": "user", "content": text}]},
        stream_mode=["custom", "values"],
        context=context or {},
    ):
        if part.event == "custom":
            events.append(part.data)
        elif part.event == "values":
            values = part.data
        elif part.event == "error":
            raise AssertionError(f"run failed: {part.data}")
    return thread["thread_id"], values, events


def tool_messages(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in values["messages"] if m["type"] == "tool"]


def meta(message: dict[str, Any]) -> dict[str, Any]:
    return message["additional_kwargs"]["deerflow_tool_meta"]


async def test_a_role_without_bash_gets_no_schema_and_a_forced_call_is_denied_and_audited(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    path, keys = governed_config(
        tmp_path,
        small=[
            ai_tools(tool_call("bash", description="list", command="ls")),
            ai_text("could not"),
        ],
    )
    use_config(path)
    client = lg_client(headers=bearer("alice", "intern"))
    _, values, events = await run_streamed(client, context={"model_name": "small"})

    first = recorded_calls(keys["small"])[0]
    assert "bash" not in first.tools and "write_file" not in first.tools
    assert {"read_file", "ls"} <= set(first.tools)

    (result,) = tool_messages(values)
    assert result["status"] == "error" and result["name"] == "bash"
    assert meta(result)["error_type"] == "permission_denied"
    assert meta(result)["source"] == "guardrail"
    denials = [e for e in events if e.get("type") == "middleware:guardrail_decision"]
    assert denials and denials[-1]["decision"] == "deny" and denials[-1]["tool"] == "bash"
    assert denials[-1]["user_id"] == "alice"
    assert "command" not in str(denials[-1])  # no argument values in the audit


async def test_a_model_the_user_may_not_use_falls_back_and_says_so(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    path, keys = governed_config(tmp_path)
    use_config(path)
    client = lg_client(headers=bearer("alice", "intern"))
    thread_id, values, _ = await run_streamed(client, context={"model_name": "big"})

    assert values["messages"][-1]["content"] == "small answered"
    assert recorded_calls(keys["big"]) == []
    state = await client.threads.get_state(thread_id)
    assert state["metadata"]["model_name"] == "small"
    assert state["metadata"]["model_authorization"] == {
        "requested": "big",
        "model_name": "small",
        "reason": "missing permission model:big",
    }


async def test_fail_closed_fails_the_run_with_a_clear_error(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_server: Any
) -> None:
    path, keys = governed_config(tmp_path, fail_closed=True)
    use_config(path)
    async with httpx.AsyncClient(
        transport=RequestScopedASGITransport(app=lg_server),
        base_url="http://deerflow.test",
        headers=bearer("alice", "intern"),
        timeout=60,
    ) as http:
        thread = (await http.post("/threads", json={})).json()
        response = await http.post(
            f"/threads/{thread['thread_id']}/runs/wait",
            json={
                "assistant_id": "lead_agent",
                "input": {"messages": [{"role": "user", "content": "go"}]},
                "context": {"model_name": "big"},
            },
        )
        body = response.text
        runs = (await http.get(f"/threads/{thread['thread_id']}/runs")).json()
    assert "model 'big' is not allowed" in body
    assert runs[0]["status"] == "error"
    assert recorded_calls(keys["big"]) == [] and recorded_calls(keys["small"]) == []


async def test_a_user_without_sandbox_execute_gets_errors_and_no_sandbox_is_created(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    path, _ = governed_config(
        tmp_path,
        big=[
            ai_tools(
                tool_call("write_file", description="note", path="notes.txt", content="x"),
                tool_call("ls", description="list", path="/mnt/user-data/workspace"),
            ),
            ai_text("no sandbox"),
        ],
    )
    use_config(path)
    client = lg_client(headers=bearer("bob", "noexec"))
    _, values, _ = await run_streamed(client)

    results = tool_messages(values)
    assert [r["status"] for r in results] == ["error", "error"]
    assert all("SandboxAuthorizationError" in r["content"] for r in results)
    users = tmp_path / "data" / "users"
    assert not users.exists() or not any(users.rglob("workspace"))


async def test_a_guardrail_pattern_blocks_admins_too_and_allows_other_commands(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_client: Callable[..., Any]
) -> None:
    path, _ = governed_config(
        tmp_path,
        big=[
            ai_tools(
                tool_call("bash", description="wipe", command="rm -rf /mnt/user-data/workspace"),
                tool_call("bash", description="greet", command="echo governed"),
            ),
            ai_text("done"),
        ],
    )
    use_config(path)
    client = lg_client(headers=bearer("root", "admin"))
    _, values, events = await run_streamed(client)

    wipe, greet = tool_messages(values)
    assert wipe["status"] == "error" and "no recursive deletes" in wipe["content"]
    assert meta(wipe)["error_type"] == "permission_denied"
    assert "governed" in greet["content"] and greet["status"] != "error"
    decisions = [
        (e["decision"], e["provider"], e["rule"])
        for e in events
        if e.get("type") == "middleware:guardrail_decision"
    ]
    assert ("deny", "rules", "rules[0]:bash") in decisions
    assert ("allow", "rules", None) in decisions


@pytest.mark.parametrize("execution", ["inprocess", "remote"])
async def test_a_subagent_inherits_the_parents_principal_and_cannot_widen_it(
    tmp_path: Path,
    use_config: Callable[[Path], Path],
    lg_client: Callable[..., Any],
    execution: str,
) -> None:
    path, keys = governed_config(
        tmp_path,
        execution=execution,
        small=[
            ai_tools(
                tool_call(
                    "task",
                    description="try bash",
                    prompt="run ls",
                    subagent_type="general-purpose",
                )
            ),
            ai_text("lead done"),
        ],
        worker=[
            ai_tools(tool_call("bash", description="list", command="ls")),
            ai_text("worker gave up"),
        ],
    )
    use_config(path)
    client = lg_client(headers=bearer("alice", "intern"))
    # Caller-supplied roles are not identity: they widen nothing.
    _, values, _ = await run_streamed(
        client, context={"model_name": "small", "roles": ["admin"], "permissions": ["*"]}
    )

    first, second = recorded_calls(keys["worker"])
    assert "bash" not in first.tools and "read_file" in first.tools
    denied = [m for m in second.messages if isinstance(m, ToolMessage) and m.name == "bash"]
    assert denied and denied[0].status == "error"
    assert denied[0].additional_kwargs["deerflow_tool_meta"]["error_type"] == "permission_denied"
    (task_result,) = tool_messages(values)
    assert task_result["name"] == "task" and "worker gave up" in task_result["content"]


async def test_whoami_shows_effective_roles_and_permissions(
    tmp_path: Path, use_config: Callable[[Path], Path], lg_server: Any
) -> None:
    path, _ = governed_config(tmp_path)
    use_config(path)
    async with httpx.AsyncClient(
        transport=RequestScopedASGITransport(app=lg_server),
        base_url="http://deerflow.test",
        timeout=30,
    ) as http:
        no_roles = (await http.get("/auth/whoami", headers=bearer("carol"))).json()
        admin = (await http.get("/auth/whoami", headers=bearer("root", "admin"))).json()
    assert no_roles["authorization"]["effective_roles"] == ["intern"]
    assert "sandbox:execute" in no_roles["authorization"]["effective_permissions"]
    assert admin["authorization"] == {
        "enabled": True,
        "effective_roles": ["admin"],
        "effective_permissions": ["*"],
    }
