"""``IsolatedMiddleware``: the host's wrapper around every contributed middleware.

It implements the failure-isolation table of spec 004 exactly:

=====================================================  ==========================================
What goes wrong                                        What the host does
=====================================================  ==========================================
the wrap hook raises before calling ``handler``        log, then call ``handler`` once (original
                                                       request)
the wrap hook never calls ``handler``                  log, then call ``handler`` itself
the wrap hook raises after ``handler`` returned        log and return the real result
the wrap hook calls ``handler`` a second time          that call raises ``RuntimeError`` in the
                                                       hook; the host returns the first result
``handler`` itself raises                              the error propagates unchanged
a lifecycle hook raises (or returns junk)              log; no state update
=====================================================  ==========================================

``GraphBubbleUp`` (LangGraph interrupts) always propagates. Wrap hooks are
observe-only: downstream always receives the original request and the caller
always receives the real downstream result, whatever the hook passes or returns.
The hook itself sees a copy of the request, so editing it in place changes
nothing either. Diagnostics read ``Extension <use>: <Class>.<hook> failed and
was skipped: <error>``.
"""

from __future__ import annotations

import copy
import functools
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from deerflow_extension_api._store import TaskStoreScope, active_task_store

__all__ = ["IsolatedMiddleware", "trace_name"]

logger = logging.getLogger("deerflow_extension_api")

_LIFECYCLE = ("before_agent", "before_model", "after_model", "after_agent")
_WRAPS = ("wrap_model_call", "wrap_tool_call")
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_NOT_CALLED = object()


def trace_name(entry_point: str, class_name: str, index: int) -> str:
    """``extension_<entry point>_<class name>_<n>``, unsafe characters replaced."""
    return f"extension_{_UNSAFE.sub('_', entry_point)}_{_UNSAFE.sub('_', class_name)}_{index}"


def _copy_request(request: Any) -> Any:
    """A copy the hook may edit freely; downstream keeps the original."""
    try:
        if isinstance(request, ModelRequest):
            return request.override(
                messages=list(request.messages),
                tools=list(request.tools),
                model_settings=dict(request.model_settings),
            )
        if isinstance(request, ToolCallRequest):
            return request.override(tool_call=copy.deepcopy(request.tool_call))
    except Exception:  # a request we cannot copy is passed as-is
        return request
    return request


def _overrides(middleware: AgentMiddleware[Any, Any], name: str) -> bool:
    return getattr(type(middleware), name) is not getattr(AgentMiddleware, name)


class IsolatedMiddleware(AgentMiddleware[Any, Any, Any]):
    """Hosts one contributed middleware; create with ``IsolatedMiddleware.wrap(...)``."""

    deerflow_fusable = False  # contributed hooks may interrupt: keep their own nodes

    def __init__(
        self,
        inner: AgentMiddleware[Any, Any],
        *,
        entry_point: str,
        name: str,
        task_scope: TaskStoreScope,
    ) -> None:
        super().__init__()
        self.inner = inner
        self.entry_point = entry_point
        self._name = name
        self.task_scope = task_scope
        self.state_schema = inner.state_schema
        self.trace_policy = inner.trace_policy
        self.tools = []

    @classmethod
    def wrap(
        cls,
        inner: AgentMiddleware[Any, Any],
        *,
        entry_point: str,
        name: str,
        task_scope: TaskStoreScope,
    ) -> IsolatedMiddleware:
        """A wrapper exposing exactly the hook families ``inner`` implements."""
        lifecycle = tuple(
            method
            for hook in _LIFECYCLE
            for method in (hook, f"a{hook}")
            if _overrides(inner, method)
        )
        wraps = tuple(w for w in _WRAPS if _overrides(inner, w) or _overrides(inner, f"a{w}"))
        wrapper_cls = _isolated_class(lifecycle, wraps)
        return wrapper_cls(inner, entry_point=entry_point, name=name, task_scope=task_scope)

    @property
    def name(self) -> str:
        return self._name

    @property
    def class_name(self) -> str:
        return type(self.inner).__name__

    def release_policy_parameters(self) -> Any:
        provider = getattr(self.inner, "release_policy_parameters", None)
        return provider() if callable(provider) else None

    def diagnose(self, hook: str, error: object) -> None:
        logger.warning(
            "Extension %s: %s.%s failed and was skipped: %s",
            self.entry_point,
            self.class_name,
            hook,
            error,
            exc_info=isinstance(error, BaseException) and logger.isEnabledFor(logging.DEBUG),
        )

    # -- wrap hooks -----------------------------------------------------------

    def _observe_sync(self, method: str, request: Any, handler: Callable[[Any], Any]) -> Any:
        if not _overrides(self.inner, method):
            return handler(request)
        calls = 0
        result: Any = _NOT_CALLED
        failure: BaseException | None = None

        def once(_ignored: Any = None) -> Any:
            nonlocal calls, result, failure
            calls += 1
            if calls > 1:
                raise RuntimeError(
                    f"{self.class_name}.{method} called its handler a second time; "
                    "extension wrap hooks must call it exactly once"
                )
            try:
                result = handler(request)
            except BaseException as exc:
                failure = exc
                raise
            return result

        try:
            with active_task_store(self.task_scope.store_for(getattr(request, "runtime", None))):
                getattr(self.inner, method)(_copy_request(request), once)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            if failure is not None:
                raise failure from None
            self.diagnose(method, exc)
            return handler(request) if calls == 0 else result
        if failure is not None:
            raise failure
        if calls == 0:
            self.diagnose(method, "the hook never called its handler")
            return handler(request)
        return result

    async def _observe_async(
        self, method: str, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        if not _overrides(self.inner, method):
            return await handler(request)
        calls = 0
        result: Any = _NOT_CALLED
        failure: BaseException | None = None

        async def once(_ignored: Any = None) -> Any:
            nonlocal calls, result, failure
            calls += 1
            if calls > 1:
                raise RuntimeError(
                    f"{self.class_name}.{method} called its handler a second time; "
                    "extension wrap hooks must call it exactly once"
                )
            try:
                result = await handler(request)
            except BaseException as exc:
                failure = exc
                raise
            return result

        try:
            with active_task_store(self.task_scope.store_for(getattr(request, "runtime", None))):
                await getattr(self.inner, method)(_copy_request(request), once)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            if failure is not None:
                raise failure from None
            self.diagnose(method, exc)
            return await handler(request) if calls == 0 else result
        if failure is not None:
            raise failure
        if calls == 0:
            self.diagnose(method, "the hook never called its handler")
            return await handler(request)
        return result

    # -- lifecycle hooks ------------------------------------------------------

    def _checked(self, method: str, update: Any) -> Any:
        if update is None or isinstance(update, (dict, Command)):
            return update
        self.diagnose(method, f"returned {type(update).__name__}, not a dict state update")
        return None

    def _lifecycle_sync(self, method: str, state: Any, runtime: Any) -> Any:
        try:
            with active_task_store(self.task_scope.store_for(runtime)):
                update = getattr(self.inner, method)(state, runtime)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            self.diagnose(method, exc)
            return None
        return self._checked(method, update)

    async def _lifecycle_async(self, method: str, state: Any, runtime: Any) -> Any:
        try:
            with active_task_store(self.task_scope.store_for(runtime)):
                update = await getattr(self.inner, method)(state, runtime)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            self.diagnose(method, exc)
            return None
        return self._checked(method, update)


def _lifecycle_method(method: str) -> Callable[..., Any]:
    if method.startswith("a"):

        async def async_hook(self: IsolatedMiddleware, state: Any, runtime: Any) -> Any:
            return await self._lifecycle_async(method, state, runtime)

        async_hook.__name__ = method
        return async_hook

    def sync_hook(self: IsolatedMiddleware, state: Any, runtime: Any) -> Any:
        return self._lifecycle_sync(method, state, runtime)

    sync_hook.__name__ = method
    return sync_hook


def _wrap_methods(family: str) -> dict[str, Callable[..., Any]]:
    def sync_hook(self: IsolatedMiddleware, request: Any, handler: Any) -> Any:
        return self._observe_sync(family, request, handler)

    async def async_hook(self: IsolatedMiddleware, request: Any, handler: Any) -> Any:
        return await self._observe_async(f"a{family}", request, handler)

    sync_hook.__name__ = family
    async_hook.__name__ = f"a{family}"
    return {family: sync_hook, f"a{family}": async_hook}


@functools.cache
def _isolated_class(lifecycle: tuple[str, ...], wraps: tuple[str, ...]) -> type[IsolatedMiddleware]:
    namespace: dict[str, Any] = {method: _lifecycle_method(method) for method in lifecycle}
    for family in wraps:
        namespace.update(_wrap_methods(family))
    return type("IsolatedMiddleware", (IsolatedMiddleware,), namespace)
