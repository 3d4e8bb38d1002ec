"""Who a run belongs to: kept importable here; the implementation is the leaf
module ``runtime.identity`` (the settings, the sandbox providers and the
subagents need it without importing the auth layer)."""

from runtime.identity import (
    DEFAULT_USER_ID,
    RESERVED_IDENTITIES,
    STUDIO_PREFIX,
    current_request_user_id,
    is_reserved_identity,
    is_studio_user,
    make_safe_user_id,
    principal_of,
    resolve_config_user_id,
    resolve_runtime_user_id,
    user_store_namespace,
)

__all__ = [
    "DEFAULT_USER_ID",
    "RESERVED_IDENTITIES",
    "STUDIO_PREFIX",
    "current_request_user_id",
    "is_reserved_identity",
    "is_studio_user",
    "make_safe_user_id",
    "principal_of",
    "resolve_config_user_id",
    "resolve_runtime_user_id",
    "user_store_namespace",
]
