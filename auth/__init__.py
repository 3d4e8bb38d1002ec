"""Identity and authorization for the LangGraph Server."""

from auth.identity import make_safe_user_id, resolve_config_user_id, resolve_runtime_user_id

__all__ = ["make_safe_user_id", "resolve_config_user_id", "resolve_runtime_user_id"]
