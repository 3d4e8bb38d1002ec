"""The offline demo through the server (issue 22 item 7): a tour that never dead-ends,
and an unknown model name that is reported where a client looks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.config import builtin_config
from runtime.scripted_model import EXHAUSTED_TEXT
from tests.support.scripted import write_config

pytestmark = pytest.mark.server


@pytest.fixture
def builtin_defaults(tmp_path: Path, use_config: Any) -> Path:
    """The built-in defaults, as `make dev` serves them without a config.yaml."""
    data = builtin_config()
    data["data_root"] = str(tmp_path / "data")
    path = tmp_path / "builtin.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return use_config(path)  # type: ignore[no-any-return]


async def _say(client: Any, thread_id: str, text: str) -> list[dict[str, Any]]:
    before = len((await client.threads.get_state(thread_id))["values"].get("messages") or [])
    await client.runs.wait(
        thread_id, "lead_agent", input={"messages": [{"role": "user", "content": text}]}
    )
    state = await client.threads.get_state(thread_id)
    return list(state["values"]["messages"][before:])


async def test_the_demo_answers_five_turns_in_a_row(lg_client: Any, builtin_defaults: Path) -> None:
    client = lg_client()
    thread_id = (await client.threads.create())["thread_id"]
    answers: list[str] = []
    tools_per_turn: list[list[str]] = []
    for text in ("hi", "go on", "and then?", "more", "again"):
        new = await _say(client, thread_id, text)
        answers.append(str(new[-1]["content"]))
        tools_per_turn.append([m["name"] for m in new if m["type"] == "tool"])
        assert all(m.get("status") != "error" for m in new if m["type"] == "tool"), new
    assert not any("exhausted" in a or a == EXHAUSTED_TEXT for a in answers), answers
    stops = [re.search(r"\b\d/4\b", a) for a in answers[:4]]
    assert [m.group(0) if m else None for m in stops] == ["1/4", "2/4", "3/4", "4/4"], answers
    assert answers[4] == answers[0]  # the tour starts over
    assert tools_per_turn[:4] == [["bash"], ["write_file", "present_files"], ["task"], []]

    state = await client.threads.get_state(thread_id)
    assert state["values"]["artifacts"] == ["/mnt/user-data/outputs/tour-1.md"]


@pytest.fixture
def one_answer(tmp_path: Path, use_config: Any) -> Path:
    return use_config(write_config(tmp_path, [{"content": "fine"}]))  # type: ignore[no-any-return]


async def test_an_unknown_model_is_reported_in_run_metadata_and_the_stream(
    lg_client: Any, one_answer: Path
) -> None:
    client = lg_client()
    thread_id = (await client.threads.create())["thread_id"]
    events: list[Any] = []
    run_id = None
    async for part in client.runs.stream(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "hi"}]},
        context={"model_name": "gpt-nonexistent"},
        stream_mode=["custom", "values"],
    ):
        if part.event == "metadata":
            run_id = part.data["run_id"]
        if part.event == "custom":
            events.append(part.data)
    warnings = [e for e in events if isinstance(e, dict) and e.get("type") == "model_warning"]
    assert len(warnings) == 1, events
    assert "gpt-nonexistent" in warnings[0]["message"]
    assert "'scripted'" in warnings[0]["message"]

    assert run_id is not None
    run = await client.runs.get(thread_id, run_id)
    assert "gpt-nonexistent" in run["metadata"]["model_warning"]


async def test_a_known_model_has_no_warning_and_a_caller_cannot_forge_one(
    lg_client: Any, one_answer: Path
) -> None:
    client = lg_client()
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "hi"}]},
        context={"model_name": "scripted"},
        metadata={"model_warning": "forged"},
    )
    await client.runs.join(thread_id, run["run_id"])
    stored = await client.runs.get(thread_id, run["run_id"])
    assert "model_warning" not in stored["metadata"]
