"""The process's sandbox provider, built once per sandbox configuration.

Graph factories, middlewares, tools and the HTTP app all ask for the provider
here, so they share one set of acquired sandboxes. Construction does no I/O
(providers promise that in ``SandboxProvider.from_settings``), which keeps it
safe to call from a graph factory on the event loop.
"""

from __future__ import annotations

import threading

from runtime.config import ConfigError, Settings, import_object
from sandbox.base import SandboxProvider

__all__ = ["get_sandbox_provider", "reset_sandbox_providers"]

_providers: dict[str, SandboxProvider] = {}
_lock = threading.Lock()


def _key(settings: Settings) -> str:
    return f"{settings.data_root_path()}\x00{settings.sandbox.model_dump_json()}"


def get_sandbox_provider(settings: Settings) -> SandboxProvider:
    """The provider ``sandbox.use`` names, shared by every caller with the same config."""
    key = _key(settings)
    provider = _providers.get(key)
    if provider is not None:
        return provider
    with _lock:
        provider = _providers.get(key)
        if provider is None:
            cls = import_object(settings.sandbox.use, what="sandbox.use")
            if not (isinstance(cls, type) and issubclass(cls, SandboxProvider)):
                raise ConfigError(
                    f"sandbox.use: {settings.sandbox.use!r} is not a SandboxProvider class"
                )
            provider = cls.from_settings(settings)
            _providers[key] = provider
    return provider


def reset_sandbox_providers() -> None:
    """Forget every provider (tests). Their sandboxes are not released."""
    with _lock:
        _providers.clear()
