"""Governance: who may use which tools, models and sandboxes, and guardrails on every call.

The public surface: the principal (``build_principal_from_context``), the
provider interfaces with the built-in role policy and rule set, the
``AuthorizationOutcome`` contract, and the setup helpers the chain uses.
"""

from authz.guardrails import (
    GuardrailAuthorizationAdapter,
    GuardrailDecision,
    GuardrailProvider,
    GuardrailRequest,
    RuleGuardrailProvider,
)
from authz.outcome import (
    AUTHORIZATION_OUTCOME_KEY,
    AuthorizationOutcome,
    pop_outcome,
    publish_outcome,
)
from authz.principal import Principal, build_principal_from_context
from authz.provider import (
    AuthorizationDecision,
    AuthorizationProvider,
    FailClosedAuthorizer,
    RolePolicyProvider,
)
from authz.setup import (
    ModelAuthorization,
    ModelAuthorizationError,
    authorize_model,
    authorizer_for,
    guardrail_for,
)

__all__ = [
    "AUTHORIZATION_OUTCOME_KEY",
    "AuthorizationDecision",
    "AuthorizationOutcome",
    "AuthorizationProvider",
    "FailClosedAuthorizer",
    "GuardrailAuthorizationAdapter",
    "GuardrailDecision",
    "GuardrailProvider",
    "GuardrailRequest",
    "ModelAuthorization",
    "ModelAuthorizationError",
    "Principal",
    "RolePolicyProvider",
    "RuleGuardrailProvider",
    "authorize_model",
    "authorizer_for",
    "build_principal_from_context",
    "guardrail_for",
    "pop_outcome",
    "publish_outcome",
]
