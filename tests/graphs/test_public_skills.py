"""The three public skills end to end: a scripted lead agent follows each SKILL.md.

The model is scripted to call exactly the tools the skill's SKILL.md tells it
to; the chain, the local sandbox and the skill's own script are real, so these
runs fail when a SKILL.md, its script or the projection drifts apart.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage, ToolMessage

from graphs.lead_agent import build_lead_agent
from runtime.config import load_settings
from runtime.paths import thread_paths
from runtime.recording_model import recorded_calls
from runtime.skills import get_skill_registry, reset_skill_registry_cache
from sandbox.provider import reset_sandbox_providers
from tests.support.scripted import (
    ai_text,
    ai_tools,
    recording_model_entry,
    tool_call,
    write_config,
)

SALES = "region,product,units,revenue\nnorth,widget,3,30.5\nsouth,widget,5,50\nnorth,gadget,2,40\nwest,gadget,,12\n"

APP = (
    "import os\n"
    'API_KEY = "sk-live-abcdefghijklmnop"\n'
    "def load(items=[]):\n"
    "    try:\n"
    "        return eval(items)\n"
    "    except:\n"
    "        return None\n"
)


def _read(skill: str) -> dict[str, Any]:
    return tool_call(
        "read_file", description="follow the skill", path=f"/mnt/skills/public/{skill}/SKILL.md"
    )


async def _run(
    tmp_path: Path,
    script: list[dict[str, Any]],
    files: dict[str, str],
    text: str,
    *,
    record: str | None = None,
) -> tuple[dict[str, Any], Path]:
    def setup() -> tuple[Any, Path]:
        reset_skill_registry_cache()
        reset_sandbox_providers()
        models = [recording_model_entry(script, key=record)] if record else None
        settings = load_settings(
            write_config(tmp_path, script, models=models, title={"enabled": False})
        )
        get_skill_registry(settings)  # as make_lead_agent does: read once, off the loop
        return settings, settings.data_root_path()

    settings, data_root = await asyncio.to_thread(setup)
    thread_id = uuid.uuid4().hex
    user_data = thread_paths(data_root, "default", thread_id).user_data

    def place() -> None:
        for rel, content in files.items():
            path = user_data / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")

    await asyncio.to_thread(place)
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph = build_lead_agent(settings, config)
    result = await graph.ainvoke({"messages": [HumanMessage(text)]}, config)
    return result, user_data


def _tools(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def _assert_skill_loaded(result: dict[str, Any], name: str) -> None:
    read = _tools(result)[0]
    assert read.status == "success" and f"name: {name}" in read.text
    assert read.additional_kwargs["deerflow_skill_read"]["name"] == name
    assert [e["name"] for e in result["skill_context"]] == [name]


async def test_csv_analysis_skill(tmp_path: Path) -> None:
    out = "/mnt/user-data/outputs/sales-profile.md"
    script = [
        ai_tools(_read("csv-analysis")),
        ai_tools(
            tool_call(
                "bash",
                description="profile the upload",
                command="python3 /mnt/skills/public/csv-analysis/scripts/analyze_csv.py "
                f"/mnt/user-data/uploads/sales.csv --group-by region --metric revenue --out {out}",
            )
        ),
        ai_tools(tool_call("present_files", filepaths=[out])),
        ai_text("North leads revenue with 70.5 across 2 sales."),
    ]
    result, user_data = await _run(
        tmp_path, script, {"uploads/sales.csv": SALES}, "Which region sells most?"
    )
    _assert_skill_loaded(result, "csv-analysis")
    bash = _tools(result)[1]
    assert bash.status == "success", bash.text
    assert "| north | 2 | 70.5 | 35.25 |" in bash.text
    assert "| revenue | numeric | 0 | 4 | 12 | 50 | 33.12 |" in bash.text
    assert "| units | numeric | 1 |" in bash.text  # the missing value is reported
    profile = await asyncio.to_thread((user_data / "outputs" / "sales-profile.md").read_text)
    assert profile.startswith("# Profile of sales.csv")
    assert result["artifacts"] == [out]


async def test_report_writer_skill(tmp_path: Path) -> None:
    outline = {
        "title": "Widget brief",
        "summary": "Widgets outsell gadgets in units.",
        "sections": [
            {"heading": "Findings", "body": "Widgets sold 8 units.", "bullets": ["north: 3"]},
            {"heading": "Method", "body": "Counted from the upload."},
        ],
        "sources": ["uploads/sales.csv"],
    }
    out = "/mnt/user-data/outputs/widget-brief.md"
    script = [
        ai_tools(_read("report-writer")),
        ai_tools(
            tool_call(
                "write_file",
                description="the outline",
                path="/mnt/user-data/workspace/report-outline.json",
                content=json.dumps(outline),
            )
        ),
        ai_tools(
            tool_call(
                "bash",
                description="render the report",
                command="python3 /mnt/skills/public/report-writer/scripts/build_report.py "
                f"/mnt/user-data/workspace/report-outline.json --out {out} --date 2026-11-30",
            )
        ),
        ai_tools(tool_call("present_files", filepaths=[out])),
        ai_text("The brief is ready: widgets outsell gadgets."),
    ]
    result, user_data = await _run(tmp_path, script, {}, "Write a brief on widgets.")
    _assert_skill_loaded(result, "report-writer")
    bash = _tools(result)[2]
    assert bash.status == "success", bash.text
    assert f"wrote {out}" in bash.text  # host paths are shown as virtual ones
    report = await asyncio.to_thread((user_data / "outputs" / "widget-brief.md").read_text)
    assert report.startswith("# Widget brief\n\n*2026-11-30*")
    assert "## 1. Findings" in report and "- [2. Method](#2-method)" in report
    assert "1. uploads/sales.csv" in report
    assert result["artifacts"] == [out]


async def test_code_review_skill(tmp_path: Path) -> None:
    scan = "/mnt/user-data/outputs/code-review-scan.json"
    review = "/mnt/user-data/outputs/code-review.md"
    script = [
        ai_tools(_read("code-review")),
        ai_tools(
            tool_call(
                "bash",
                description="scan the workspace",
                command="python3 /mnt/skills/public/code-review/scripts/review.py "
                f"/mnt/user-data/workspace --out {scan}",
            )
        ),
        ai_tools(
            tool_call(
                "read_file",
                description="confirm the findings",
                path="/mnt/user-data/workspace/app.py",
                start_line=1,
                end_line=7,
            )
        ),
        ai_tools(
            tool_call(
                "write_file",
                description="the review",
                path=review,
                content="# Review\n\n- app.py:2 - hard-coded API key - move it to the env.\n",
            )
        ),
        ai_tools(tool_call("present_files", filepaths=[review])),
        ai_text("Top finding: a hard-coded API key in app.py line 2."),
    ]
    result, user_data = await _run(
        tmp_path, script, {"workspace/app.py": APP}, "Review my code please."
    )
    _assert_skill_loaded(result, "code-review")
    bash = _tools(result)[1]
    assert bash.status == "success", bash.text
    assert "Scanned 1 files: 2 high, 2 medium" in bash.text
    assert "/mnt/user-data/workspace/app.py:2  [secret]" in bash.text
    findings = json.loads(
        await asyncio.to_thread((user_data / "outputs" / "code-review-scan.json").read_text)
    )
    rules = {(f["rule"], f["line"]) for f in findings["findings"]}
    assert {("secret", 2), ("eval", 5), ("mutable-default", 3), ("bare-except", 6)} <= rules
    assert result["artifacts"] == [review]


async def test_slash_activation_keeps_the_upload_listing(tmp_path: Path) -> None:
    """``/csv-analysis ...`` replaces the user message in the request: the uploads go along."""
    key = f"public-{uuid.uuid4().hex[:8]}"
    script = [
        ai_tools(
            tool_call(
                "bash",
                description="profile the upload",
                command="python3 /mnt/skills/public/csv-analysis/scripts/analyze_csv.py "
                "/mnt/user-data/uploads/sales.csv --json",
            )
        ),
        ai_text("Four rows."),
    ]
    result, _ = await _run(
        tmp_path,
        script,
        {"uploads/sales.csv": SALES},
        "/csv-analysis how many rows?",
        record=key,
    )
    block = recorded_calls(key)[0].messages[-1]
    assert "<user_request>how many rows?</user_request>" in block.text
    assert "<message_context>" in block.text and "sales.csv" in block.text
    assert 'name="csv-analysis" source="public"' in block.text
    assert '"rows": 4' in _tools(result)[0].text
    assert [e["name"] for e in result["skill_context"]] == ["csv-analysis"]
