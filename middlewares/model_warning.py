"""ModelWarningMiddleware: tell the caller, in the stream, that its model was replaced.

An unknown ``model_name`` runs the default model rather than failing the run;
the warning is also in the run's metadata (``runs.get``) and the checkpoint
metadata, but a client that only reads the stream would never see it. Present
only when the run's ``model_name`` was unknown (not one of the chain's slots).
"""

from __future__ import annotations

import logging
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime

__all__ = ["MODEL_WARNING_EVENT", "ModelWarningMiddleware"]

logger = logging.getLogger(__name__)

MODEL_WARNING_EVENT = "model_warning"


class ModelWarningMiddleware(AgentMiddleware[Any, Any]):
    """Emit ``{"type": "model_warning", "message": ...}`` on the ``custom`` stream once per run.

    Args:
        warning: The text to emit (what ``runtime.models.resolve_model_name`` said).

    Example:
        ``ModelWarningMiddleware(warning="unknown model_name 'x'; using 'scripted'")``
    """

    deerflow_fusable = True  # hooks never interrupt: may share a node

    def __init__(self, *, warning: str) -> None:
        super().__init__()
        if not isinstance(warning, str) or not warning.strip():
            raise ValueError("warning must be a non-empty string")
        self.warning = warning

    def _emit(self) -> None:
        try:
            writer = get_stream_writer()
        except RuntimeError:  # outside a graph run: nothing to stream to
            return
        try:
            writer({"type": MODEL_WARNING_EVENT, "message": self.warning})
        except Exception:  # a stream problem must never fail the run
            logger.debug("model warning not streamed", exc_info=True)

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> None:
        self._emit()

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> None:
        self._emit()
