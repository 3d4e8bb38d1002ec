"""SkillActivation (18) and SkillToolPolicy (19) through real ``create_agent`` runs."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from middlewares._skills import SkillChannel, parse_slash
from middlewares.skill_activation import EVENT_TYPE, SkillActivationMiddleware
from middlewares.skill_tool_policy import SKILL_READ_KEY, SkillToolPolicyMiddleware
from runtime.config import Settings
from runtime.recording_model import RecordingChatModel, recorded_calls
from runtime.skills import SkillRegistry, load_skill_registry
from runtime.state import ThreadState, merge_skill_context

SKILLS = {
    "reader": "---\nname: reader\ndescription: Reads only.\nallowed-tools: [read_file]\n---\n"
    "Use <b>read_file</b> & nothing else.\n",
    "free": "---\nname: free\ndescription: No limits.\n---\nAnything goes.\n",
    "retired": "---\nname: retired\ndescription: Disabled.\n---\nx\n",
}


@tool("read_file")
def read_file(path: str) -> str:
    """Read a file."""
    return f"content of {path}"


@tool("bash")
def bash(command: str) -> str:
    """Run a command."""
    return f"ran {command}"


@tool("tool_search")
def tool_search(query: str) -> str:
    """Discover tools."""
    return "none"


@pytest.fixture
def registry(tmp_path: Path) -> SkillRegistry:
    for name, text in SKILLS.items():
        (tmp_path / "custom" / name).mkdir(parents=True)
        (tmp_path / "custom" / name / "SKILL.md").write_text(text, encoding="utf-8")
    settings = Settings.model_validate(
        {
            "skills": {
                "public_path": str(tmp_path / "none"),
                "custom_path": str(tmp_path / "custom"),
                "disabled": ["retired"],
            }
        }
    )
    return load_skill_registry(settings)


def _agent(
    registry: SkillRegistry | None,
    script: list[dict[str, Any]],
    *,
    allowlist: frozenset[str] | None = None,
) -> tuple[Any, str]:
    key = f"mw-{uuid.uuid4().hex[:8]}"
    model = RecordingChatModel.model_validate({"script": script, "recording_key": key})
    channel = SkillChannel()
    agent = create_agent(
        model,
        [read_file, bash, tool_search],
        middleware=[
            SkillActivationMiddleware(registry=registry, allowlist=allowlist, channel=channel),
            SkillToolPolicyMiddleware(registry=registry, allowlist=allowlist, channel=channel),
        ],
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    return agent, key


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


def _config(thread: str | None = None, **configurable: Any) -> dict[str, Any]:
    """A new run (its own run id) on ``thread`` (a new thread by default)."""
    return {
        "configurable": {"thread_id": thread or uuid.uuid4().hex, **configurable},
        "metadata": {"run_id": uuid.uuid4().hex},
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/reader do X", ("reader", "do X")),
        ("  /reader\n\nmulti\nline", ("reader", "multi\nline")),
        ("/reader", ("reader", "")),
        ("/usr/bin ls", None),
        ("/ hello", None),
        ("/Reader x", None),
        ("please /reader x", None),
    ],
)
def test_slash_syntax_is_strict(text: str, expected: tuple[str, str] | None) -> None:
    assert parse_slash(text) == expected


async def test_activation_block_is_request_only_escaped_and_audited_once(
    registry: SkillRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    agent, key = _agent(
        registry, [_call("read_file", path="/mnt/user-data/workspace/a.txt"), {"content": "ok"}]
    )
    caplog.set_level(logging.INFO, logger="middlewares.skill_activation")
    result = await agent.ainvoke(
        {"messages": [HumanMessage("/reader summarise a.txt", id="u1")]}, _config()
    )
    first, second = recorded_calls(key)
    for call in (first, second):  # replayed on every model call of the run
        block = call.messages[0]
        assert block.additional_kwargs["deerflow_producer_kind"] == "skill_activation"
        assert "<user_request>summarise a.txt</user_request>" in block.text
        assert "Use &lt;b&gt;read_file&lt;/b&gt; &amp; nothing else." in block.text
        assert call.tools == ["read_file", "tool_search"]  # framework-safe discovery stays
    audits = [r for r in caplog.records if "skill activation activated" in r.getMessage()]
    assert len(audits) == 1
    assert result["messages"][0].content == "/reader summarise a.txt"
    assert result["skill_context"] == [
        {
            "name": "reader",
            "path": "/mnt/skills/custom/reader/SKILL.md",
            "description": "Reads only.",
        }
    ]


async def test_refusals_never_call_the_model(registry: SkillRegistry) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/nope x", {}, "there is no skill named 'nope'"),
        ("/retired x", {}, "disabled"),
        ("/free x", {"allowlist": frozenset({"reader"})}, "may not use the skill 'free'"),
    ]
    for text, kwargs, reason in cases:
        agent, key = _agent(registry, [{"content": "never"}], **kwargs)
        result = await agent.ainvoke({"messages": [HumanMessage(text)]}, _config())
        assert reason in result["messages"][-1].content
        assert recorded_calls(key) == []


@pytest.mark.parametrize(
    ("references", "reason"),
    [
        (["reader", "nope"], "no skill named 'nope'"),
        ([f"s{i}" for i in range(17)], "at most 16"),
        (["reader", 7], "must be skill names"),
    ],
)
async def test_skill_references_are_all_or_nothing(
    registry: SkillRegistry, references: list[Any], reason: str
) -> None:
    agent, key = _agent(registry, [{"content": "never"}])
    result = await agent.ainvoke(
        {"messages": [HumanMessage("go")]}, _config(skill_references=references)
    )
    assert reason in result["messages"][-1].content
    assert recorded_calls(key) == []


async def test_forced_call_outside_allowed_tools_is_blocked(registry: SkillRegistry) -> None:
    agent, _key = _agent(registry, [_call("bash", command="rm -rf /"), {"content": "ok"}])
    result = await agent.ainvoke({"messages": [HumanMessage("/reader x")]}, _config())
    blocked = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert blocked.status == "error" and "ran" not in blocked.text
    meta = blocked.additional_kwargs["deerflow_tool_meta"]
    assert (meta["error_type"], meta["source"]) == ("blocked", "skill_tool_policy")
    assert blocked.additional_kwargs["deerflow_skill_policy"]["allowed"] == ["read_file"]


async def test_a_skill_md_read_in_the_turn_clamps_and_is_captured(registry: SkillRegistry) -> None:
    agent, key = _agent(
        registry,
        [
            _call("read_file", path="/mnt/skills/custom/reader/SKILL.md"),
            _call("bash", command="ls"),
            {"content": "ok"},
        ],
    )
    thread = uuid.uuid4().hex
    result = await agent.ainvoke({"messages": [HumanMessage("find a skill")]}, _config(thread))
    first, second, _third = recorded_calls(key)
    assert "bash" in first.tools  # nothing active yet
    assert second.tools == ["read_file", "tool_search"]
    read, blocked = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert read.additional_kwargs[SKILL_READ_KEY] == {
        "name": "reader",
        "path": "/mnt/skills/custom/reader/SKILL.md",
        "source": "custom",
    }
    assert blocked.status == "error"
    assert [e["name"] for e in result["skill_context"]] == ["reader"]
    # The next turn starts unclamped: a read binds only the turn it happened in.
    await agent.ainvoke({"messages": [HumanMessage("thanks")]}, _config(thread))
    assert len(recorded_calls(key)) == 4
    assert "bash" in recorded_calls(key)[-1].tools


async def test_unrestricted_skill_and_plain_turns_are_not_filtered(
    registry: SkillRegistry,
) -> None:
    agent, key = _agent(registry, [{"content": "a"}, {"content": "b"}])
    thread = uuid.uuid4().hex
    await agent.ainvoke({"messages": [HumanMessage("/free x")]}, _config(thread))
    await agent.ainvoke({"messages": [HumanMessage("plain")]}, _config(thread))
    assert [c.tools for c in recorded_calls(key)] == [["read_file", "bash", "tool_search"]] * 2


async def test_registry_failure_fails_closed(registry: SkillRegistry) -> None:
    key = f"mw-{uuid.uuid4().hex[:8]}"
    model = RecordingChatModel.model_validate(
        {"script": [_call("bash", command="ls"), {"content": "ok"}], "recording_key": key}
    )
    agent = create_agent(
        model,
        [read_file, bash, tool_search],
        middleware=[SkillToolPolicyMiddleware(registry=None)],
        state_schema=ThreadState,
    )
    config: Any = _config(skill_references=["reader"])
    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert recorded_calls(key)[0].tools == ["tool_search"]
    blocked = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert blocked.status == "error" and "could not be resolved" in blocked.text


def test_constructor_validation() -> None:
    with pytest.raises(TypeError):
        SkillActivationMiddleware(registry="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SkillToolPolicyMiddleware(registry=None, allowlist={"a"})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SkillToolPolicyMiddleware(registry=None, read_tools="read_file")


def test_skill_context_reducer_dedupes_by_name_and_never_keeps_bodies() -> None:
    bad: Any = ["junk", {"name": 3}, {"name": "a", "path": "/p/a2", "description": None}]
    merged = merge_skill_context(
        [{"name": "a", "path": "/p/a", "description": "A"}, *bad[:2]],
        [
            {"name": "b", "path": "/p/b", "description": "B", "body": "secret body"},
            bad[2],
        ],
    )
    assert merged == [
        {"name": "b", "path": "/p/b", "description": "B"},
        {"name": "a", "path": "/p/a2", "description": ""},
    ]
    assert merge_skill_context(None, None) == []


async def test_audit_event_is_streamed_once_per_run(registry: SkillRegistry) -> None:
    agent, _key = _agent(
        registry, [_call("read_file", path="/mnt/user-data/workspace/a.txt"), {"content": "ok"}]
    )
    events = [
        chunk
        async for chunk in agent.astream(
            {"messages": [HumanMessage("/reader go")]}, _config(), stream_mode="custom"
        )
    ]
    audits = [e for e in events if isinstance(e, dict) and e.get("type") == EVENT_TYPE]
    assert audits == [
        {"type": EVENT_TYPE, "outcome": "activated", "source": "slash", "skills": ["reader"]}
    ]
