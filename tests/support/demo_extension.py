"""A test extension package, installed through ``plugins:`` like a real one.

``install(registry, config)`` registers one contributor whose contributions
come from ``config["contributions"]``: ``{kind, placement, scope?, order?,
mode?}``. Every middleware records what it saw into the app-scoped
``Recorder`` (so tests can read it back) and counts calls in the *task* store,
so a test can tell one run's store from the next. ``mode`` makes a wrap hook
misbehave in each way the failure-isolation table lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import interrupt

from deerflow_extension_api import (
    AgentBuildContext,
    AgentScope,
    ExtensionData,
    MiddlewarePlacement,
    Placement,
    task_store_from_runtime,
)

__all__ = ["Recorder", "ask_human", "install"]


@dataclass
class Recorder:
    events: list[tuple[Any, ...]] = field(default_factory=list)
    contexts: list[AgentBuildContext] = field(default_factory=list)
    stores: list[int] = field(default_factory=list)


@dataclass
class CallCount:
    value: int = 0


def _count(runtime: Any) -> int | None:
    store = task_store_from_runtime(runtime)
    if store is None:
        return None
    counter = store.get_or_init(CallCount, CallCount)
    counter.value += 1
    return counter.value


class _Observer(AgentMiddleware[Any, Any, Any]):
    axis = ""

    def __init__(self, recorder: Recorder, mode: str = "ok", label: str = "") -> None:
        super().__init__()
        self.recorder = recorder
        self.mode = mode
        self.label = label or type(self).__name__

    def _before(self, request: Any) -> None:
        count = _count(getattr(request, "runtime", None))
        store = task_store_from_runtime(getattr(request, "runtime", None))
        self.recorder.stores.append(id(store))
        self.recorder.events.append((self.label, self.axis, "in", count))
        if self.mode == "raise_before":
            raise RuntimeError(f"{self.label} failed before the handler")

    def _modified(self, request: Any) -> Any:
        if self.axis == "model":
            return request.override(messages=[HumanMessage("forged prompt")])
        call = dict(request.tool_call)
        call["args"] = {"text": "forged"}
        return request.override(tool_call=call)

    def _fake(self, request: Any) -> Any:
        if self.axis == "model":
            return AIMessage("forged answer")
        return ToolMessage("forged output", tool_call_id=request.tool_call["id"])

    def _after(self, request: Any, result: Any) -> Any:
        self.recorder.events.append((self.label, self.axis, "out", type(result).__name__))
        if self.mode == "raise_after":
            raise RuntimeError(f"{self.label} failed after the handler")
        if self.mode == "modify":
            return self._fake(request)
        return result

    def _sync(self, request: Any, handler: Any) -> Any:
        self._before(request)
        if self.mode == "never_call":
            return self._fake(request)
        target = self._modified(request) if self.mode == "modify" else request
        if self.mode == "swallow_handler_error":
            try:
                return handler(target)
            except Exception as exc:
                self.recorder.events.append((self.label, self.axis, "swallowed", str(exc)))
                return self._fake(request)
        result = handler(target)
        if self.mode == "call_twice":
            try:
                handler(target)
            except RuntimeError as exc:
                self.recorder.events.append((self.label, self.axis, "second call", str(exc)))
                raise
        return self._after(request, result)

    async def _async(self, request: Any, handler: Any) -> Any:
        self._before(request)
        if self.mode == "never_call":
            return self._fake(request)
        target = self._modified(request) if self.mode == "modify" else request
        if self.mode == "swallow_handler_error":
            try:
                return await handler(target)
            except Exception as exc:
                self.recorder.events.append((self.label, self.axis, "swallowed", str(exc)))
                return self._fake(request)
        result = await handler(target)
        if self.mode == "call_twice":
            try:
                await handler(target)
            except RuntimeError as exc:
                self.recorder.events.append((self.label, self.axis, "second call", str(exc)))
                raise
        return self._after(request, result)


class ModelObserver(_Observer):
    axis = "model"

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._sync(request, handler)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await self._async(request, handler)


class ToolObserver(_Observer):
    axis = "tool"

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return self._sync(request, handler)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await self._async(request, handler)


class AsyncOnlyToolObserver(_Observer):
    """Implements only the async side: the host supplies the sync pass-through."""

    axis = "tool"

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await self._async(request, handler)


class StateObserver(_Observer):
    axis = "state"

    async def abefore_model(self, state: Any, runtime: Any) -> Any:
        count = _count(runtime)
        self.recorder.events.append((self.label, "state", "before_model", count))
        if self.mode == "raise":
            raise RuntimeError(f"{self.label} lifecycle failure")
        if self.mode == "junk":
            return 42
        if self.mode == "update":
            return {"title": f"seen {len(state['messages'])} messages"}
        return None


class ModelAndToolObserver(_Observer):
    """Wraps both axes: as a TOOL_VISIBLE contribution it breaks an invariant."""

    axis = "both"

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


CLASSES: dict[str, type[_Observer]] = {
    cls.__name__: cls
    for cls in (
        ModelObserver,
        ToolObserver,
        AsyncOnlyToolObserver,
        StateObserver,
        ModelAndToolObserver,
    )
}


class DemoContributor:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def contribute_middlewares(
        self, app_store: ExtensionData, ctx: AgentBuildContext
    ) -> Sequence[MiddlewarePlacement]:
        recorder = app_store.get_or_init(Recorder, Recorder)
        recorder.contexts.append(ctx)
        if self.config.get("raise_in_contribute"):
            raise RuntimeError("contributor exploded")
        items: list[Any] = []
        for spec in self.config.get("contributions", []):
            middleware = CLASSES[spec["kind"]](
                recorder, mode=spec.get("mode", "ok"), label=spec.get("label", "")
            )
            items.append(
                MiddlewarePlacement(
                    middleware,
                    Placement[spec["placement"]],
                    scope=AgentScope[spec.get("scope", "BOTH")],
                    order=spec.get("order", 0),
                )
            )
        if self.config.get("junk_item"):
            items.insert(0, "not a placement")
        if self.config.get("invalid_placement"):
            items.insert(0, MiddlewarePlacement("not a middleware", Placement.STANDARD))  # type: ignore[arg-type]
        return items


def install(registry: Any, config: dict[str, Any]) -> None:
    registry.app_store.get_or_init(Recorder, Recorder)
    registry.middlewares(DemoContributor(config))


class ConfiguredAudit(AgentMiddleware[Any, Any, Any]):
    """An ``extensions.middlewares`` class: trusted config, kwargs from YAML."""

    def __init__(self, level: str = "info", since: str | None = None, limit: int = 3) -> None:
        super().__init__()
        self.level, self.since, self.limit = level, since, limit

    def release_policy_parameters(self) -> dict[str, Any]:
        return {"level": self.level, "since": self.since, "limit": self.limit}

    async def abefore_model(self, state: Any, runtime: Any) -> Any:
        return None


class ExplodingConstructor(AgentMiddleware[Any, Any, Any]):
    def __init__(self, **kwargs: Any) -> None:
        raise ValueError("no way")


NOT_A_MIDDLEWARE = object()


@tool
async def ask_human(question: str) -> str:
    """Ask the human and wait for the answer (interrupts the run)."""
    return f"human said: {interrupt(question)}"
