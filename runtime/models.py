"""Chat model selection and construction from the ``models:`` config list."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel

from runtime.config import ConfigError, ModelConfig, Settings, import_object

__all__ = ["ResolvedModel", "create_chat_model", "resolve_model_name"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedModel:
    """Which entry a run uses, and why (``warning`` is set on a fallback)."""

    entry: ModelConfig
    requested: str | None
    warning: str | None = None

    @property
    def name(self) -> str:
        return self.entry.name


def resolve_model_name(settings: Settings, requested: str | None) -> ResolvedModel:
    """The requested entry, or the default one with a warning for an unknown name."""
    default = settings.default_model
    if requested is None or requested == "":
        return ResolvedModel(entry=default, requested=requested)
    entry = settings.model_by_name(requested)
    if entry is not None:
        return ResolvedModel(entry=entry, requested=requested)
    warning = f"unknown model_name {requested!r}; using the default model {default.name!r}"
    logger.warning(warning)
    return ResolvedModel(entry=default, requested=requested, warning=warning)


def create_chat_model(
    entry: ModelConfig, *, thinking_enabled: bool = False, sdk_retries: bool = True
) -> BaseChatModel:
    """Construct the entry's model class with its kwargs; errors name the entry.

    ``sdk_retries=False`` (the agents' models while LLMErrorHandling is on) sets
    ``max_retries=0`` on any model class that has that field (``ChatOpenAI``,
    ``ChatAnthropic``, ...): the middleware retries, honouring ``Retry-After``
    and the circuit breaker, and the SDK's own retries would multiply its
    attempts (3 of ours x 3 of the SDK's).
    """
    what = f"model {entry.name!r}"
    cls = import_object(entry.use, what=f"{what} use")
    if not (isinstance(cls, type) and issubclass(cls, BaseChatModel)):
        raise ConfigError(f"{what} use: {entry.use!r} is not a BaseChatModel class")
    kwargs: dict[str, Any] = entry.constructor_kwargs()
    if thinking_enabled and entry.supports_thinking and entry.thinking:
        kwargs.update(entry.thinking)
    if not sdk_retries and "max_retries" in getattr(cls, "model_fields", {}):
        configured = kwargs.get("max_retries")
        if configured not in (None, 0):
            logger.info(
                "%s: max_retries=%s ignored, LLMErrorHandling retries instead", what, configured
            )
        kwargs["max_retries"] = 0
    try:
        return cls(**kwargs)
    except Exception as exc:
        raise ConfigError(f"{what}: cannot construct {entry.use} ({exc})") from exc
