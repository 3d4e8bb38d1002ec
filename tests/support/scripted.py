"""Helpers to write configs whose default model is a ``ScriptedChatModel``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ai_text",
    "ai_tools",
    "recording_model_entry",
    "scripted_model_entry",
    "tool_call",
    "write_config",
]


def tool_call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def ai_tools(*calls: dict[str, Any], content: str = "") -> dict[str, Any]:
    """A scripted turn that calls tools (optionally with text)."""
    return {"content": content, "tool_calls": list(calls)}


def ai_text(content: str) -> dict[str, Any]:
    return {"content": content}


def scripted_model_entry(
    script: list[dict[str, Any]], *, name: str = "scripted", **extra: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "use": "runtime.scripted_model:ScriptedChatModel",
        "script": script,
        **extra,
    }


def write_config(
    directory: Path,
    script: list[dict[str, Any]] | None = None,
    *,
    models: list[dict[str, Any]] | None = None,
    filename: str = "config.yaml",
    **sections: Any,
) -> Path:
    """Write a config file; ``script`` makes a single scripted default model."""
    data: dict[str, Any] = dict(sections)
    if models is not None:
        data["models"] = models
    elif script is not None:
        data["models"] = [scripted_model_entry(script)]
    data.setdefault("data_root", str(directory / "data"))
    path = directory / filename
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def recording_model_entry(
    script: list[dict[str, Any]], *, key: str, name: str = "recorder", **extra: Any
) -> dict[str, Any]:
    """A model entry whose requests are kept under ``key`` (see ``runtime.recording_model``)."""
    return {
        "name": name,
        "use": "runtime.recording_model:RecordingChatModel",
        "recording_key": key,
        "script": script,
        **extra,
    }
