"""``ConfigError`` and ``import_object``: how configured ``module.path:Name``
entries are imported, for plugins and for the host alike.

They live in the extension API (the bottom of the house, importing no host
module) so that plugin loading raises the very ``ConfigError`` the host's
settings raise (``runtime.config`` re-exports both).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ConfigError", "import_object"]


class ConfigError(ValueError):
    """A configuration problem, with a message that names the key at fault."""


def import_object(path: str, *, what: str) -> Any:
    """Import ``module.path:Name``; errors name ``what`` (the config entry)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what}: {path!r} must look like 'module.path:Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import module {module_name!r} ({exc})") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(f"{what}: module {module_name!r} has no attribute {attr!r}") from exc
