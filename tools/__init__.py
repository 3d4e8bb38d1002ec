"""The agent's tools and the registry that picks them from config."""

from tools._common import is_sandbox_tool
from tools.registry import load_tools

__all__ = ["is_sandbox_tool", "load_tools"]
