"""``make_safe_user_id``, ``principal_of`` and the two resolvers, plus a real graph run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langgraph_sdk.auth.types import StudioUser

from auth.identity import (
    current_request_user_id,
    is_reserved_identity,
    is_studio_user,
    make_safe_user_id,
    principal_of,
    resolve_config_user_id,
    resolve_runtime_user_id,
    user_store_namespace,
)
from graphs.lead_agent import build_lead_agent
from runtime.config import load_settings
from runtime.paths import thread_paths
from tests.auth.conftest import PROBE_SCRIPT, PROBE_TOOL
from tests.support.auth_probe import PROBE_FILE
from tests.support.scripted import write_config

SAFE = re.compile(r"[A-Za-z0-9_-]{1,64}")


@pytest.mark.parametrize("raw", ["alice", "Bob_2", "a-b", "x" * 64, "0"])
def test_safe_ids_pass_through(raw: str) -> None:
    assert make_safe_user_id(raw) == raw


@pytest.mark.parametrize(
    "raw",
    ["..", ".", "../etc", "a/b", "a\\b", "alice@example.com", "x" * 65, "ümlaut", "a\x00b", " "],
)
def test_unsafe_ids_become_safe_hashed_ids(raw: str) -> None:
    safe = make_safe_user_id(raw)
    assert SAFE.fullmatch(safe), safe
    assert safe not in {".", ".."} and "--" in safe
    assert make_safe_user_id(safe) == safe  # idempotent
    assert is_reserved_identity(safe)  # nobody may claim a hashed id verbatim


def test_empty_and_none_are_default() -> None:
    assert make_safe_user_id("") == "default"
    assert make_safe_user_id(None) == "default"


def test_different_unsafe_ids_never_collide() -> None:
    raws = ["a/b", "a\\b", "a b", "a.b", "a:b", "a//b", "a__b/", "A/b"]
    safe = [make_safe_user_id(raw) for raw in raws]
    assert len(set(safe)) == len(raws), safe


def test_reserved_identities() -> None:
    assert is_reserved_identity("default")
    assert is_reserved_identity("studio:anyone")
    assert is_reserved_identity("a_b--" + "0123456789abcdef" * 2)
    assert not is_reserved_identity("alice")
    assert not is_reserved_identity("alice--bob")
    assert not is_reserved_identity("auth0|123")


def test_principal_of_users_and_the_studio_user() -> None:
    studio = StudioUser("langgraph-studio-user")
    assert is_studio_user(studio)
    assert is_studio_user({"kind": "StudioUser", "identity": "x"})
    assert not is_studio_user({"identity": "x"})
    assert principal_of(studio, studio_policy="local") == "default"
    assert principal_of(studio, studio_policy="isolated") == "studio:langgraph-studio-user"
    assert principal_of({"identity": "alice"}) == "alice"
    assert principal_of(SimpleNamespace(identity="bob")) == "bob"
    assert principal_of("carol") == "carol"
    assert principal_of(None) is None
    assert principal_of({"identity": ""}) is None


def test_resolve_runtime_user_id_order() -> None:
    user = SimpleNamespace(identity="from-server")
    config = {"configurable": {"langgraph_auth_user_id": "from-config"}}
    context = {"user_id": "from-context"}
    runtime = SimpleNamespace(
        server_info=SimpleNamespace(user=user), config=config, context=context
    )
    assert resolve_runtime_user_id(runtime) == "from-server"
    runtime.server_info = None
    assert resolve_runtime_user_id(runtime) == "from-config"
    runtime.config = {"configurable": {"langgraph_auth_user": {"identity": "auth-user"}}}
    assert resolve_runtime_user_id(runtime) == "auth-user"
    runtime.config = {"configurable": {}}
    assert resolve_runtime_user_id(runtime) == "from-context"
    runtime.context = SimpleNamespace(user_id="from-dataclass")
    assert resolve_runtime_user_id(runtime) == "from-dataclass"
    runtime.context = None
    token = current_request_user_id.set("from-request")
    try:
        assert resolve_runtime_user_id(runtime) == "from-request"
    finally:
        current_request_user_id.reset(token)
    assert resolve_runtime_user_id(runtime) == "default"
    runtime.context = {"user_id": "../../root"}
    assert resolve_runtime_user_id(runtime) == make_safe_user_id("../../root")


def test_resolve_config_user_id_order() -> None:
    assert resolve_config_user_id(None) == "default"
    assert resolve_config_user_id({"configurable": {"user_id": "server-set"}}) == "server-set"
    assert (
        resolve_config_user_id(
            {"configurable": {"user_id": "x", "langgraph_auth_user_id": "auth-id"}}
        )
        == "auth-id"
    )
    studio = {
        "configurable": {"langgraph_auth_user": StudioUser("s"), "langgraph_auth_user_id": "s"}
    }
    # The Studio user maps through the configured policy (mode none: the local user).
    assert resolve_config_user_id(studio) == "default"  # type: ignore[arg-type]
    assert resolve_config_user_id({"configurable": {"langgraph_auth_user_id": "a b"}}) == (
        make_safe_user_id("a b")
    )


def test_user_store_namespace() -> None:
    assert user_store_namespace("alice", "memories") == ("alice", "memories")
    assert user_store_namespace("a.b")[0] == make_safe_user_id("a.b")


async def test_a_scripted_graph_run_resolves_the_safe_id(tmp_path: Path) -> None:
    """A real create_agent graph: the probe tool resolves the user and writes its file."""
    settings = load_settings(write_config(tmp_path, PROBE_SCRIPT, tools=[PROBE_TOOL]))
    graph = build_lead_agent(settings)
    config: Any = {"configurable": {"thread_id": "t1", "langgraph_auth_user_id": "carol/../x"}}
    await graph.ainvoke({"messages": [{"role": "user", "content": "hi"}]}, config)
    safe = make_safe_user_id("carol/../x")
    written = thread_paths(settings.data_root_path(), safe, "t1").outputs / PROBE_FILE
    assert json.loads(written.read_text())["user_id"] == safe
