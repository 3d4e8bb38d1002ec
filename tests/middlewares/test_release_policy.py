"""Self-description: JSON that round-trips, and a config change changes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from middlewares.chain import build_middlewares
from middlewares.release_policy import canonical_hash, collect_release_policies
from tests.support.chain_fixtures import inputs_for

AUDIT = "tests.support.demo_extension:ConfiguredAudit"


class Broken(AgentMiddleware[Any, Any, Any]):
    def release_policy_parameters(self) -> Any:
        raise RuntimeError("cannot describe")


class NotJson(AgentMiddleware[Any, Any, Any]):
    def release_policy_parameters(self) -> Any:
        return {"when": object()}


def _policies(tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    extensions = {"middlewares": [{"class": AUDIT, "kwargs": kwargs}]}
    return collect_release_policies(build_middlewares(inputs_for(tmp_path, extensions=extensions)))


def test_policies_round_trip_and_follow_the_config(tmp_path: Path) -> None:
    first = _policies(tmp_path, limit=3)
    assert json.loads(json.dumps(first)) == first
    audit = next(m for m in first["middlewares"] if m["name"] == "ConfiguredAudit")
    assert audit == {
        "position": audit["position"],
        "name": "ConfiguredAudit",
        "class": AUDIT,
        "parameters": {"level": "info", "since": None, "limit": 3},
    }
    again = _policies(tmp_path, limit=3)
    assert again == first
    changed = _policies(tmp_path, limit=7)
    assert changed["policy_hash"] != first["policy_hash"]
    changed_audit = next(m for m in changed["middlewares"] if m["name"] == "ConfiguredAudit")
    assert changed_audit["parameters"]["limit"] == 7


def test_failing_and_non_json_providers_are_reported_not_raised() -> None:
    document = collect_release_policies([Broken(), NotJson()])
    assert json.loads(json.dumps(document)) == document
    assert document["middlewares"][0]["error"].startswith("release_policy_parameters() failed")
    assert "not JSON-serialisable" in document["middlewares"][1]["error"]


def test_canonical_hash_is_stable_and_short() -> None:
    text = "line one\r\nline two"
    assert canonical_hash(text) == canonical_hash("line one\nline two")
    assert canonical_hash({"b": 1, "a": [1, 2]}) == canonical_hash({"a": [1, 2], "b": 1})
    assert canonical_hash("x") != canonical_hash("y")
    assert canonical_hash("x").startswith("sha256:") and len(canonical_hash("x")) == 7 + 16
    assert len(canonical_hash("x" * 100_000, length=32)) == 7 + 32
