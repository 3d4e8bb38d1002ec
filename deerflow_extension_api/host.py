"""The host's side of the extension contract: loading plugins and placing their
contributions in a chain. Used by the middleware chain and the graph factories;
extensions themselves use the package's top-level names."""

from deerflow_extension_api._host import apply_contributions
from deerflow_extension_api._placement import StackEntry
from deerflow_extension_api._plugins import LoadedExtensions, aload_extensions, load_extensions
from deerflow_extension_api._store import TaskStoreScope

__all__ = [
    "LoadedExtensions",
    "StackEntry",
    "TaskStoreScope",
    "aload_extensions",
    "apply_contributions",
    "load_extensions",
]
