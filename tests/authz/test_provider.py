"""The role policy, the fail-closed wrapper, the rule guardrails and model authorization."""

from __future__ import annotations

from typing import Any

import pytest

from authz.guardrails import GuardrailAuthorizationAdapter, GuardrailRequest, RuleGuardrailProvider
from authz.principal import Principal, build_principal_from_context
from authz.provider import (
    AuthorizationDecision,
    FailClosedAuthorizer,
    RolePolicyProvider,
    permission_matches,
)
from authz.setup import ModelAuthorizationError, authorize_model, authorizer_for, guardrail_for
from runtime.config import ConfigError, Settings

POLICY = RolePolicyProvider(
    roles={"admin": ["*"], "dev": ["tool:*", "model:small", "sandbox:execute"], "ro": ["tool:ls"]},
    default_role="ro",
)


def who(*roles: str, permissions: tuple[str, ...] = ()) -> Principal:
    return Principal(user_id="u", roles=roles, permissions=permissions)


@pytest.mark.parametrize(
    ("granted", "needed", "matches"),
    [
        ("*", "tool:bash", True),
        ("tool:*", "tool:bash", True),
        ("tool:*", "model:big", False),
        ("tool:bash", "tool:bash", True),
        ("tool:bash", "tool:bash2", False),
        ("model:*", "sandbox:execute", False),
        ("sandbox:execute", "sandbox:execute", True),
    ],
)
def test_permission_matching(granted: str, needed: str, matches: bool) -> None:
    assert permission_matches(granted, needed) is matches


def test_roles_grant_their_permissions_and_nothing_else() -> None:
    assert POLICY.authorize(who("dev"), "tool", "use", "bash").allowed
    assert POLICY.authorize(who("dev"), "model", "use", "small").allowed
    denied = POLICY.authorize(who("dev"), "model", "use", "big")
    assert not denied.allowed and denied.reason == "missing permission model:big"
    assert POLICY.authorize(who("admin"), "model", "use", "big").allowed


def test_users_without_roles_get_the_default_role_and_unknown_roles_grant_nothing() -> None:
    assert POLICY.authorize(who(), "tool", "use", "ls").allowed
    assert not POLICY.authorize(who(), "tool", "use", "bash").allowed
    assert not POLICY.authorize(who("ghost"), "tool", "use", "ls").allowed


def test_token_permissions_add_to_the_roles() -> None:
    assert POLICY.authorize(who("ro", permissions=("tool:bash",)), "tool", "use", "bash").allowed


def test_default_role_must_exist() -> None:
    with pytest.raises(ValueError, match="default_role"):
        RolePolicyProvider(roles={"a": []}, default_role="b")
    with pytest.raises(ValueError, match="default_role"):
        Settings.model_validate({"authorization": {"roles": {"a": []}, "default_role": "b"}})


def test_malformed_permissions_are_config_errors() -> None:
    with pytest.raises(ValueError, match="is not a permission"):
        Settings.model_validate({"authorization": {"roles": {"a": ["bash"]}}})


class Raising:
    def authorize(self, *args: Any) -> AuthorizationDecision:
        raise RuntimeError("policy service down")


class Garbage:
    def authorize(self, *args: Any) -> Any:
        return "yes"


async def test_a_provider_that_raises_or_answers_garbage_denies() -> None:
    for provider in (Raising(), Garbage()):
        authorizer = FailClosedAuthorizer(provider)
        assert not authorizer.authorize(who("admin"), "tool", "use", "ls").allowed
        assert not (await authorizer.aauthorize(who("admin"), "tool", "use", "ls")).allowed


def request_for(tool: str, args: dict[str, Any], run: str = "r1") -> GuardrailRequest:
    return GuardrailRequest(who("admin"), tool, args, "call-1", ("t", run))


def test_rule_patterns_search_every_string_argument() -> None:
    rules = RuleGuardrailProvider([{"tool": "bash", "deny_pattern": r"rm\s+-rf"}])
    assert not rules.evaluate(request_for("bash", {"command": "cd / && rm  -rf x"})).allowed
    assert not rules.evaluate(request_for("bash", {"nested": {"list": ["rm -rf /"]}})).allowed
    assert rules.evaluate(request_for("bash", {"command": "ls"})).allowed
    assert rules.evaluate(request_for("read_file", {"path": "rm -rf"})).allowed


def test_call_caps_count_allowed_calls_per_run() -> None:
    rules = RuleGuardrailProvider([{"tool": "web_fetch", "max_calls_per_run": 2}])
    results = [rules.evaluate(request_for("web_fetch", {"url": "u"})).allowed for _ in range(3)]
    assert results == [True, True, False]
    assert rules.evaluate(request_for("web_fetch", {"url": "u"}, run="r2")).allowed


def test_the_adapter_checks_tool_permissions_and_exempts_only_named_tools() -> None:
    authorizer = FailClosedAuthorizer(POLICY)
    adapter = GuardrailAuthorizationAdapter(authorizer, exempt_tools=("tool_search",))
    ro = GuardrailRequest(who("ro"), "bash", {}, "c", ("t", "r"))
    assert not adapter.evaluate(ro).allowed
    search = GuardrailRequest(who("ro"), "tool_search", {}, "c", ("t", "r"))
    assert adapter.evaluate(search).allowed
    assert not GuardrailAuthorizationAdapter(authorizer).evaluate(search).allowed


def settings(**authorization: Any) -> Settings:
    return Settings.model_validate(
        {
            "models": [
                {"name": "big", "use": "runtime.scripted_model:ScriptedChatModel"},
                {"name": "small", "use": "runtime.scripted_model:ScriptedChatModel"},
            ],
            "authorization": {
                "enabled": True,
                "roles": {"dev": ["model:small"], "none": []},
                **authorization,
            },
        }
    )


def test_model_authorization_falls_back_to_the_first_allowed_model() -> None:
    s = settings()
    result = authorize_model(s, who("dev"), s.models[0])
    assert result.entry.name == "small" and result.requested == "big"
    assert result.fallback_reason == "missing permission model:big"
    assert authorize_model(s, who("dev"), s.models[1]).fallback_reason is None


def test_model_authorization_fails_closed_or_without_any_allowed_model() -> None:
    s = settings(fail_closed=True)
    with pytest.raises(ModelAuthorizationError, match="fail_closed"):
        authorize_model(s, who("dev"), s.models[0])
    with pytest.raises(ModelAuthorizationError, match="no configured model"):
        authorize_model(settings(), who("none"), settings().models[0])


def test_custom_providers_load_by_use_and_bad_ones_are_config_errors() -> None:
    custom = Settings.model_validate(
        {"authorization": {"enabled": True, "use": "tests.authz.test_provider:Raising"}}
    )
    authorizer = authorizer_for(custom)
    assert authorizer is not None and authorizer.name == "Raising"
    assert authorizer_for(custom) is authorizer  # built once per settings
    broken = Settings.model_validate(
        {"guardrails": {"enabled": True, "use": "tests.authz.test_provider:Nope"}}
    )
    with pytest.raises(ConfigError, match=r"guardrails\.use"):
        guardrail_for(broken)


def test_the_principal_comes_only_from_the_server_user() -> None:
    config = {
        "configurable": {
            "langgraph_auth_user": {"identity": "alice", "roles": ["dev"], "permissions": ["x:y"]},
            "roles": ["admin"],
        },
        "context": {"roles": ["admin"], "is_internal": True},
    }
    principal = build_principal_from_context(config)
    assert principal == Principal(
        user_id="alice", roles=("dev",), permissions=("x:y",), is_internal=False
    )
    delegated = {
        "configurable": {"langgraph_auth_user": {"identity": "a", "delegated_subagent": 1}}
    }
    assert build_principal_from_context(delegated).is_internal
    assert build_principal_from_context({}).user_id == "default"
