"""SkillToolPolicyMiddleware (spec 000, number 19): an active skill's ``allowed-tools`` hold.

Only a real activation clamps tools; enabled skills sitting in the prompt and
an agent's skill allowlist never do. Policy sources, resolved against the live
registry and the run's allowlist on every model call:

1. an explicit activation this run (``/skill-name`` or ``skill_references``,
   as SkillActivationMiddleware published it): authoritative, so reading
   another skill cannot widen the explicit skill's tools;
2. otherwise, skills whose ``SKILL.md`` a configured read tool loaded in this
   turn (since the latest user message): the union of their tools.

A skill without ``allowed-tools`` does not restrict. ``tool_search`` and
``describe_skill`` stay available (framework-safe discovery); ``task`` is not
exempt, so a restricted skill cannot delegate around its policy. A registry
that failed to load, or active skills none of which is still usable, leave
only the framework-safe tools (fail closed); a single stale skill is skipped
while another valid one remains.

The model sees only the allowed schemas; a call to anything else (a model can
still name a hidden tool) gets an error ``ToolMessage`` with
``deerflow_tool_meta``. The model hook stores its decision (run-scoped and
process-private, see ``SkillChannel``) for the tool calls of that response;
every model call refreshes it (an explicit activation's decision is made once
per run: the registry and the allowlist cannot change within one), and a tool
call without one (no run id, or a resumed run) resolves live from the state's
messages. Successful reads of skill files are stamped ``deerflow_skill_read``
and a read ``SKILL.md`` joins ``skill_context``.

This is behavioural scoping, not a security boundary: ``bash cat`` of a skill
is not seen, and the sandbox is what isolates.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelCallResult, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from deerflow_extension_api.provenance import ProducerKind, read_provenance
from middlewares._run_scope import current_run_key
from middlewares._skills import (
    ACTIVATION_CONTEXT_KEY,
    ACTIVATION_MARKER_KEY,
    FRAMEWORK_SAFE_TOOLS,
    PLAIN_TURN,
    POLICY_CONTEXT_KEY,
    Activation,
    SkillChannel,
    find_activation,
    latest_user_message,
)
from middlewares._tool_meta import blocked_tool_message
from runtime.run_options import merged_run_config, skill_references_of
from runtime.skills import Skill, SkillRegistry, skill_ref_for_path

__all__ = ["SKILL_READ_KEY", "SkillToolPolicyMiddleware"]

SKILL_READ_KEY = "deerflow_skill_read"


@dataclass(frozen=True)
class _Decision:
    source: str  # "none" | "slash" | "references" | "read" | "fail_closed"
    paths: tuple[str, ...] = ()
    allowed: frozenset[str] | None = None  # None: no restriction
    explicit: bool = False  # from the run's activation: fixed for the whole run

    def permits(self, tool: str) -> bool:
        return self.allowed is None or tool in self.allowed or tool in FRAMEWORK_SAFE_TOOLS

    def as_payload(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "paths": list(self.paths),
            "allowed": sorted(self.allowed) if self.allowed is not None else None,
        }


_OPEN = _Decision("none")


def _tool_name(tool: Any) -> str | None:
    name = getattr(tool, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(tool, dict):
        if isinstance(tool.get("name"), str):
            return str(tool["name"])
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
    return None


def _union(skills: Iterable[Skill]) -> frozenset[str] | None:
    allowed: set[str] = set()
    for skill in skills:
        if skill.allowed_tools is None:
            return None
        allowed.update(skill.allowed_tools)
    return frozenset(allowed)


def _injected_activation(messages: Sequence[Any]) -> tuple[str, list[str]] | None:
    """The activation SkillActivation put into this request (request-only, server-stamped)."""
    for message in reversed(messages):
        provenance = read_provenance(message)
        if provenance is None or provenance.producer_kind != ProducerKind.SKILL_ACTIVATION:
            continue
        marker = (message.additional_kwargs or {}).get(ACTIVATION_MARKER_KEY)
        if isinstance(marker, dict) and isinstance(marker.get("paths"), list):
            source = marker.get("source")
            return (
                source if isinstance(source, str) else "slash",
                [p for p in marker["paths"] if isinstance(p, str)],
            )
    return None


def _run_config() -> Any:
    try:
        return get_config()
    except RuntimeError:
        return None


class SkillToolPolicyMiddleware(AgentMiddleware[Any, Any]):
    """Filters tool schemas and blocks tool calls outside an active skill's ``allowed-tools``.

    Args:
        registry: the loaded skill registry; None (load failure) fails closed
            whenever a skill is active.
        allowlist: the skills this agent may use; None means every enabled one.
        channel: the token shared with SkillActivationMiddleware of the same chain.
        read_tools: tools whose successful read of a ``SKILL.md`` loads that skill.

    Example::

        channel = SkillChannel()
        [SkillActivationMiddleware(registry=r, channel=channel),
         SkillToolPolicyMiddleware(registry=r, channel=channel)]
    """

    deerflow_fusable = True  # hooks never interrupt or goto: may share a node

    def __init__(
        self,
        *,
        registry: SkillRegistry | None,
        allowlist: frozenset[str] | None = None,
        channel: SkillChannel | None = None,
        read_tools: Sequence[str] = ("read_file",),
    ) -> None:
        super().__init__()
        if registry is not None and not isinstance(registry, SkillRegistry):
            raise TypeError("registry must be a SkillRegistry or None")
        if allowlist is not None and not isinstance(allowlist, frozenset):
            raise TypeError("allowlist must be a frozenset of skill names or None")
        if isinstance(read_tools, str) or not all(isinstance(t, str) and t for t in read_tools):
            raise ValueError("read_tools must be a list of tool names")
        self.registry = registry
        self.allowlist = allowlist
        self.channel = channel or SkillChannel()
        self.read_tools = tuple(sorted(set(read_tools)))

    def release_policy_parameters(self) -> dict[str, Any]:
        return {
            "read_tools": list(self.read_tools),
            "framework_safe_tools": sorted(FRAMEWORK_SAFE_TOOLS),
        }

    # --- decisions ---------------------------------------------------------------

    def _skills_for_paths(self, paths: Iterable[str]) -> tuple[list[Skill], int]:
        """Usable skills for ``paths`` (live registry + allowlist), and how many paths there were."""
        assert self.registry is not None
        found: dict[str, Skill] = {}
        count = 0
        for path in paths:
            count += 1
            skill = self.registry.by_path(path)
            if skill is None or skill.path != path:
                continue
            usable, _reason = self.registry.resolve(skill.name, self.allowlist)
            if usable is not None:
                found[usable.name] = usable
        return list(found.values()), count

    def _from_paths(self, source: str, paths: Sequence[str]) -> _Decision:
        if not paths:
            return _OPEN
        if self.registry is None:
            return _Decision("fail_closed", tuple(paths), frozenset())
        skills, _ = self._skills_for_paths(paths)
        if not skills:
            return _Decision("fail_closed", tuple(paths), frozenset())
        return _Decision(source, tuple(s.path for s in skills), _union(skills))

    def _loaded_this_turn(self, messages: Sequence[Any]) -> list[str]:
        """SKILL.md paths a read tool loaded successfully since the latest user message."""
        found = latest_user_message(messages)
        turn = messages[found[0] + 1 :] if found else messages
        calls: dict[str, str] = {}
        read_tools = self.read_tools
        for message in turn:
            if not isinstance(message, AIMessage):
                continue  # (a getattr on other messages costs a pydantic miss each)
            for call in message.tool_calls:
                if call.get("name") in read_tools:
                    args = call.get("args")
                    path = args.get("path") if isinstance(args, dict) else None
                    if isinstance(path, str) and "/skills/" in path and call.get("id"):
                        calls[str(call["id"])] = path
        if not calls or self.registry is None:  # the common case: no skill read this turn
            return []
        paths: list[str] = []
        for message in turn:
            if isinstance(message, ToolMessage) and message.status != "error":
                path = calls.get(message.tool_call_id)
                if path is not None:
                    ref = skill_ref_for_path(self.registry, path)
                    if ref is not None and ref["path"] not in paths:
                        paths.append(ref["path"])
        return paths

    def _live(self, messages: Sequence[Any], run: str) -> _Decision:
        published = self.channel.read(ACTIVATION_CONTEXT_KEY, run)
        activation: Activation | None
        if isinstance(published, Activation):
            activation = published
        elif published is PLAIN_TURN:
            activation = None
        else:  # no run id (or another chain): resolve from the request itself
            injected = _injected_activation(messages)
            if injected is not None:
                return self._from_paths(injected[0], injected[1])
            references = skill_references_of(merged_run_config(_run_config()))
            activation = find_activation(messages, references, self.registry, self.allowlist)
        if activation is not None:
            if activation.error is not None:
                return _Decision("fail_closed", (), frozenset(), explicit=True)
            decision = self._from_paths(activation.source, activation.paths)
            return _Decision(decision.source, decision.paths, decision.allowed, explicit=True)
        if self.registry is None:
            return _OPEN
        return self._from_paths("read", self._loaded_this_turn(messages))

    @staticmethod
    def _run() -> str:
        thread_id, run_id = current_run_key()
        return f"{thread_id}:{run_id}"

    # --- model side ----------------------------------------------------------------

    def _filtered(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        run = self._run()
        stored = self.channel.read(POLICY_CONTEXT_KEY, run)
        if isinstance(stored, _Decision) and stored.explicit:
            decision = stored  # an explicit activation holds for the whole run
        else:
            decision = self._live(request.messages, run)
            if decision != stored:
                self.channel.publish(POLICY_CONTEXT_KEY, run, decision)
        if decision.allowed is None:
            return request
        tools = [t for t in request.tools if decision.permits(_tool_name(t) or "")]
        if len(tools) == len(request.tools):
            return request
        return request.override(tools=tools)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._filtered(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._filtered(request))

    # --- tool side -----------------------------------------------------------------

    def _decision_for_tool(self, request: ToolCallRequest) -> _Decision:
        run = self._run()
        stored = self.channel.read(POLICY_CONTEXT_KEY, run)
        if isinstance(stored, _Decision):
            return stored  # this run's latest model-call decision (the registry is immutable)
        state = request.state if isinstance(request.state, dict) else {}
        messages = state.get("messages") or []
        return self._live(messages, run)

    def _blocked(self, request: ToolCallRequest, decision: _Decision) -> ToolMessage:
        name = str(request.tool_call.get("name") or "")
        allowed = sorted((decision.allowed or frozenset()) | FRAMEWORK_SAFE_TOOLS)
        if decision.source == "fail_closed":
            why = "the active skill could not be resolved, so only discovery tools are allowed"
        else:
            why = f"the active skill allows only: {', '.join(allowed)}"
        return blocked_tool_message(
            content=f"Tool `{name}` is not allowed here: {why}.",
            tool_call_id=str(request.tool_call.get("id") or ""),
            name=name,
            error_type="blocked",
            source="skill_tool_policy",
            extra_kwargs={"deerflow_skill_policy": decision.as_payload()},
        )

    def _stamp(
        self, request: ToolCallRequest, message: ToolMessage
    ) -> tuple[ToolMessage, dict[str, str] | None]:
        assert self.registry is not None
        args = request.tool_call.get("args")
        path = args.get("path") if isinstance(args, dict) else None
        if message.status == "error" or not isinstance(path, str):
            return message, None
        normalized = "/" + "/".join(p for p in path.split("/") if p not in ("", "."))
        skill = self.registry.by_path(normalized)
        if skill is None:
            return message, None
        stamped = message.model_copy(
            update={
                "additional_kwargs": {
                    **(message.additional_kwargs or {}),
                    SKILL_READ_KEY: {
                        "name": skill.name,
                        "path": normalized,
                        "source": skill.source,
                    },
                }
            }
        )
        return stamped, skill_ref_for_path(self.registry, normalized)

    def _after_tool(self, request: ToolCallRequest, result: Any) -> Any:
        """Stamp successful reads of skill files; a read SKILL.md joins ``skill_context``."""
        if self.registry is None or request.tool_call.get("name") not in self.read_tools:
            return result
        if isinstance(result, ToolMessage):
            stamped, ref = self._stamp(request, result)
            if ref is None:
                return stamped
            return Command(update={"messages": [stamped], "skill_context": [ref]})
        if isinstance(result, Command) and isinstance(result.update, dict):
            messages = result.update.get("messages")
            if not isinstance(messages, list):
                return result
            refs: list[dict[str, str]] = []
            new_messages = []
            for item in messages:
                if isinstance(item, ToolMessage) and item.tool_call_id == request.tool_call.get(
                    "id"
                ):
                    item, ref = self._stamp(request, item)
                    if ref is not None:
                        refs.append(ref)
                new_messages.append(item)
            update = {**result.update, "messages": new_messages}
            if refs:
                update["skill_context"] = refs
            return Command(
                graph=result.graph, update=update, resume=result.resume, goto=result.goto
            )
        return result

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        decision = self._decision_for_tool(request)
        if not decision.permits(str(request.tool_call.get("name") or "")):
            return self._blocked(request, decision)
        return self._after_tool(request, handler(request))  # type: ignore[no-any-return]

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        decision = self._decision_for_tool(request)
        if not decision.permits(str(request.tool_call.get("name") or "")):
            return self._blocked(request, decision)
        return self._after_tool(request, await handler(request))  # type: ignore[no-any-return]
