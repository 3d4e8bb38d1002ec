"""Plugin loading: ``plugins:`` in config, each module's ``install(registry, config)``.

Plugins load once per settings object, in list order, off the event loop
(``aload_extensions``): importing a module and an ``install`` that builds
clients are blocking work. A plugin that cannot be imported or whose
``install`` raises fails agent creation with an error naming the entry: it is
trusted operator configuration, and a silently missing audit extension is worse
than a loud start-up error.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from deerflow_extension_api._store import ExtensionData
from deerflow_extension_api._types import MiddlewareContributor
from deerflow_extension_api.loading import ConfigError, import_object

__all__ = [
    "ConfiguredMiddleware",
    "ExtensionRegistry",
    "LoadedExtensions",
    "PluginLoadError",
    "RegisteredContributor",
    "aload_extensions",
    "load_extensions",
    "load_plugins",
    "resolve_configured",
]


class PluginLoadError(ConfigError):
    """A ``plugins:`` entry could not be imported or installed."""


@dataclass(frozen=True)
class RegisteredContributor:
    entry_point: str
    contributor: MiddlewareContributor


class ExtensionRegistry:
    """Handed to a plugin's ``install(registry, config)``; records its contributions."""

    def __init__(self, entry_point: str, app_store: ExtensionData) -> None:
        self.entry_point = entry_point
        self.app_store = app_store
        self._contributors: list[RegisteredContributor] = []

    def middlewares(self, contributor: MiddlewareContributor) -> None:
        """Register a middleware contributor (called on every agent assembly)."""
        if not callable(getattr(contributor, "contribute_middlewares", None)):
            raise TypeError(
                f"{self.entry_point}: registry.middlewares() needs an object with "
                f"contribute_middlewares(app_store, ctx), got {type(contributor).__name__}"
            )
        self._contributors.append(RegisteredContributor(self.entry_point, contributor))

    @property
    def contributors(self) -> tuple[RegisteredContributor, ...]:
        return tuple(self._contributors)


@dataclass(frozen=True)
class ConfiguredMiddleware:
    """One resolved ``extensions.middlewares`` entry: trusted config, no wrapper."""

    index: int
    class_path: str
    cls: type[AgentMiddleware[Any, Any]]
    kwargs: Mapping[str, Any]

    @property
    def label(self) -> str:
        return f"extensions.middlewares[{self.index}] ({self.class_path})"

    def instantiate(self) -> AgentMiddleware[Any, Any]:
        """A fresh instance; constructor errors fail agent creation naming the entry."""
        try:
            instance = self.cls(**dict(self.kwargs))
        except Exception as exc:
            raise ConfigError(f"{self.label}: constructor failed: {exc!r}") from exc
        return instance


@dataclass(frozen=True)
class LoadedExtensions:
    """Everything the host needs to assemble extensions into a chain."""

    contributors: tuple[RegisteredContributor, ...] = ()
    app_store: ExtensionData = field(default_factory=ExtensionData)
    configured: tuple[ConfiguredMiddleware, ...] = ()


def resolve_configured(
    entries: list[tuple[str, Mapping[str, Any]]],
) -> tuple[ConfiguredMiddleware, ...]:
    """Import each ``extensions.middlewares`` class; errors name the entry."""
    resolved: list[ConfiguredMiddleware] = []
    for index, (class_path, kwargs) in enumerate(entries):
        what = f"extensions.middlewares[{index}] ({class_path})"
        cls = import_object(class_path, what=what)
        if not isinstance(cls, type) or not issubclass(cls, AgentMiddleware):
            raise ConfigError(f"{what}: {class_path!r} is not an AgentMiddleware class")
        resolved.append(ConfiguredMiddleware(index, class_path, cls, dict(kwargs)))
    return tuple(resolved)


def _entry_point(spec: str) -> tuple[str, str]:
    module, _, function = spec.partition(":")
    return module.strip(), (function.strip() or "install")


def load_plugins(
    plugins: list[tuple[str, Mapping[str, Any]]], app_store: ExtensionData | None = None
) -> tuple[tuple[RegisteredContributor, ...], ExtensionData]:
    """Import and install ``(module[:function], config)`` entries in order."""
    store = app_store if app_store is not None else ExtensionData()
    contributors: list[RegisteredContributor] = []
    for index, (spec, config) in enumerate(plugins):
        module_name, function_name = _entry_point(spec)
        label = f"plugins[{index}] ({spec!r})"
        if not module_name:
            raise PluginLoadError(f"{label}: expected 'package.module' or 'package.module:install'")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise PluginLoadError(f"{label}: cannot import module {module_name!r} ({exc})") from exc
        install = getattr(module, function_name, None)
        if not callable(install):
            raise PluginLoadError(f"{label}: module {module_name!r} has no {function_name}()")
        registry = ExtensionRegistry(f"{module_name}:{function_name}", store)
        try:
            install(registry, dict(config))
        except Exception as exc:
            raise PluginLoadError(f"{label}: {function_name}() failed: {exc!r}") from exc
        contributors.extend(registry.contributors)
    return tuple(contributors), store


_cache: tuple[object, LoadedExtensions] | None = None
_cache_lock = threading.Lock()


def load_extensions(settings: Any) -> LoadedExtensions:
    """The loaded plugins for ``settings`` (installed once per settings object). Blocking."""
    global _cache
    cached = _cache
    if cached is not None and cached[0] is settings:
        return cached[1]
    with _cache_lock:
        if _cache is not None and _cache[0] is settings:
            return _cache[1]
        plugins = [(p.module, p.config) for p in getattr(settings, "plugins", ())]
        contributors, store = load_plugins(plugins)
        extensions = getattr(settings, "extensions", None)
        configured = resolve_configured(
            [(m.class_path, m.kwargs) for m in getattr(extensions, "middlewares", ())]
        )
        loaded = LoadedExtensions(contributors=contributors, app_store=store, configured=configured)
        _cache = (settings, loaded)
        return loaded


async def aload_extensions(settings: Any) -> LoadedExtensions:
    """Async twin: the first load for a settings object runs in a worker thread."""
    cached = _cache
    if cached is not None and cached[0] is settings:
        return cached[1]
    return await asyncio.to_thread(load_extensions, settings)
