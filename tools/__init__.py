"""The agent's tools and the registry that picks them from config."""

from tools.registry import load_tools

__all__ = ["load_tools"]
