"""SkillActivationMiddleware (spec 000, number 18): ``/skill-name task`` activates a skill.

On strict ``/skill-name task`` syntax in the latest real user message, or with
``skill_references`` (1-16 names) in the run's context, the named skills are
resolved against the enabled registry and the run's allowlist, all or
nothing. A resolved activation replaces that user message *in the model
request only* with a hidden ``<slash_skill_activation>`` block: the task text
once, then each ``SKILL.md`` body xml-escaped (so tags inside a skill cannot
break the envelope), stamped with ``skill_activation`` provenance. State keeps
what the user sent; ``skill_context`` gains the skills' references (name, path,
description; never bodies).

An unknown, disabled or not-allowed skill is answered by an AI message this
middleware builds, without a model call. The first activation of a run emits a
``middleware:skill_activation`` event (and a log line); every later model call
of the run (tool loop, LLM retry) replays the same block without re-auditing.
"""

from __future__ import annotations

import html
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.config import get_config
from langgraph.types import Command

from deerflow_extension_api.provenance import ContentKind, ProducerKind, provenance_kwargs
from middlewares._run_scope import current_run_key, emit_event
from middlewares._skills import (
    ACTIVATION_CONTEXT_KEY,
    ACTIVATION_MARKER_KEY,
    PLAIN_TURN,
    Activation,
    SkillChannel,
    find_activation,
)
from middlewares._text import content_text
from middlewares.input_sanitization import ORIGINAL_USER_CONTENT_KEY
from runtime.run_options import merged_run_config, skill_references_of
from runtime.skills import SkillRegistry

__all__ = ["EVENT_TYPE", "SkillActivationMiddleware", "render_activation"]

logger = logging.getLogger(__name__)

EVENT_TYPE = "middleware:skill_activation"
_MAX_AUDITED_RUNS = 1024


def render_activation(activation: Activation, message_context: str = "") -> str:
    """The hidden block a resolved activation puts into the model request.

    ``message_context`` is what other middlewares added to the user's message
    (the uploaded-files listing): the block replaces that message in the
    request, so it carries it along, escaped like everything else.
    """
    lines = [
        "<slash_skill_activation>",
        "The user activated the skill(s) below for this request. Follow their "
        "instructions; their files (scripts, references) are under the paths shown "
        "and can be read with read_file or run from the sandbox.",
        f"<user_request>{html.escape(activation.task)}</user_request>",
    ]
    if message_context.strip():
        lines.append(f"<message_context>{html.escape(message_context.strip())}</message_context>")
    for skill in activation.skills:
        lines.append(
            f'<skill name="{html.escape(skill.name)}" source="{skill.source}" '
            f'path="{html.escape(skill.path)}">'
        )
        lines.append(
            f'<skill_content encoding="xml-escaped">{html.escape(skill.body)}</skill_content>'
        )
        lines.append("</skill>")
    lines.append("</slash_skill_activation>")
    return "\n".join(lines)


def _message_context(request: ModelRequest[Any], activation: Activation) -> str:
    """What the state's user message holds beyond the user's own text (e.g. uploads)."""
    state = request.state if isinstance(request.state, dict) else {}
    for message in reversed(state.get("messages") or []):
        if not isinstance(message, HumanMessage) or message.id != activation.message_id:
            continue
        original = (message.additional_kwargs or {}).get(ORIGINAL_USER_CONTENT_KEY)
        text = content_text(message.content)
        if isinstance(original, str) and original and original in text and text != original:
            return text.replace(original, "", 1)
        return ""
    return ""


class SkillActivationMiddleware(AgentMiddleware[Any, Any]):
    """Turns an explicit skill activation into hidden, request-only context.

    Args:
        registry: the loaded skill registry; None (it failed to load) refuses
            every activation.
        allowlist: the skills this agent may use; None means every enabled one.
        channel: the token shared with SkillToolPolicyMiddleware of the same chain.

    Example::

        SkillActivationMiddleware(registry=get_skill_registry(settings), allowlist=None,
                                  channel=channel)
    """

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        registry: SkillRegistry | None,
        allowlist: frozenset[str] | None = None,
        channel: SkillChannel | None = None,
    ) -> None:
        super().__init__()
        if registry is not None and not isinstance(registry, SkillRegistry):
            raise TypeError("registry must be a SkillRegistry or None")
        if allowlist is not None and not isinstance(allowlist, frozenset):
            raise TypeError("allowlist must be a frozenset of skill names or None")
        self.registry = registry
        self.allowlist = allowlist
        self.channel = channel or SkillChannel()
        self._audited: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._blocks: OrderedDict[str, HumanMessage] = OrderedDict()
        self._lock = threading.Lock()

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "skills": sorted(s.name for s in self.registry.enabled()) if self.registry else None,
            "allowlist": sorted(self.allowlist) if self.allowlist is not None else None,
        }

    # --- hooks -------------------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        plan = self._plan(request)
        if plan is None:
            return handler(request)
        if isinstance(plan, AIMessage):
            return ModelResponse(result=[plan])
        new_request, update = plan
        return self._finish(handler(new_request), update)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        plan = self._plan(request)
        if plan is None:
            return await handler(request)
        if isinstance(plan, AIMessage):
            return ModelResponse(result=[plan])
        new_request, update = plan
        return self._finish(await handler(new_request), update)

    # --- work --------------------------------------------------------------------

    @staticmethod
    def _finish(response: Any, update: dict[str, Any] | None) -> ModelCallResult[Any]:
        if not update:
            return response  # type: ignore[no-any-return]
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def _plan(
        self, request: ModelRequest[Any]
    ) -> AIMessage | tuple[ModelRequest[Any], dict[str, Any] | None] | None:
        thread_id, run_id = current_run_key()
        run = f"{thread_id}:{run_id}"
        cached = self.channel.read(ACTIVATION_CONTEXT_KEY, run)
        activation: Activation | None
        if isinstance(cached, Activation):
            activation = cached  # the same run: resolved once, replayed
        elif cached is PLAIN_TURN:
            return None
        else:
            try:
                config = get_config()
            except RuntimeError:
                config = None
            references = skill_references_of(merged_run_config(config))
            activation = find_activation(
                request.messages, references, self.registry, self.allowlist
            )
            self.channel.publish(ACTIVATION_CONTEXT_KEY, run, activation or PLAIN_TURN)
        if activation is None:
            return None
        if activation.error is not None:
            self._audit(activation, thread_id, run_id, outcome="refused")
            return AIMessage(
                content=(
                    f"I can't activate that skill: {activation.error}. "
                    "Ask me which skills are available, or send the request without the "
                    "leading /name."
                ),
                additional_kwargs={
                    "deerflow_skill_activation": {
                        "status": "refused",
                        "skills": list(activation.names),
                        "reason": activation.error,
                    }
                },
            )
        self._audit(activation, thread_id, run_id, outcome="activated")
        block = self._blocks.get(run)
        if block is None:
            block = self._block(request, activation)
            if "-" not in run.split(":"):
                self._remember(run, block)
        messages = list(request.messages)
        position = next(
            (
                i
                for i in range(len(messages) - 1, -1, -1)
                if activation.message_id is not None and messages[i].id == activation.message_id
            ),
            None,
        )
        if position is None:
            messages.append(block)
        else:
            messages[position] = block
        update = None
        state = request.state if isinstance(request.state, dict) else {}
        entries = state.get("skill_context")
        known = (
            {e.get("name") for e in entries if isinstance(e, dict)}
            if isinstance(entries, list)
            else set()
        )
        refs = [s.ref() for s in activation.skills]
        if any(r["name"] not in known for r in refs):
            update = {"skill_context": refs}
        return request.override(messages=messages), update

    def _remember(self, run: str, block: HumanMessage) -> None:
        with self._lock:
            self._blocks[run] = block
            while len(self._blocks) > _MAX_AUDITED_RUNS:
                self._blocks.popitem(last=False)

    @staticmethod
    def _block(request: ModelRequest[Any], activation: Activation) -> HumanMessage:
        """The request-only block (built once per run, then replayed as is)."""
        return HumanMessage(
            content=render_activation(activation, _message_context(request, activation)),
            **provenance_kwargs(
                ContentKind.SKILL_ACTIVATION,
                ProducerKind.SKILL_ACTIVATION,
                entity_id=",".join(activation.names)[:64],
                additional_kwargs={
                    "hide_from_ui": True,
                    ACTIVATION_MARKER_KEY: {
                        "source": activation.source,
                        "names": list(activation.names),
                        "paths": activation.paths,
                    },
                },
            ),
        )

    def _audit(self, activation: Activation, thread_id: str, run_id: str, *, outcome: str) -> bool:
        """Record once per (run, user message, skills); False when this is a replay."""
        key = (thread_id, run_id, str(activation.message_id), outcome, *activation.names)
        with self._lock:
            if key in self._audited:
                return False
            self._audited[key] = None
            while len(self._audited) > _MAX_AUDITED_RUNS:
                self._audited.popitem(last=False)
        event = {
            "type": EVENT_TYPE,
            "outcome": outcome,
            "source": activation.source,
            "skills": list(activation.names),
        }
        if activation.error:
            event["reason"] = activation.error
        logger.info(
            "skill activation %s: %s (%s)", outcome, ",".join(activation.names), activation.source
        )
        emit_event(event)
        return True
