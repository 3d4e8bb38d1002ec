"""Kept importable for the middlewares: the implementation is ``runtime.messages``."""

from runtime.messages import content_text

__all__ = ["content_text"]
