"""Probe middlewares that record every hook call, for chain order and fusion tests.

``probe("A", log, ...)`` builds a real ``AgentMiddleware`` whose class overrides
exactly the hooks asked for (``create_agent`` inspects the class), records
``"A.before_model"``, ``"A.wrap_model_call:in"`` / ``":out"`` ... into ``log``,
and returns whatever the matching ``on[hook](state, call_number)`` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware

__all__ = ["LIFECYCLE", "Behaviour", "probe"]

LIFECYCLE = ("before_agent", "before_model", "after_model", "after_agent")
Behaviour = Callable[[dict[str, Any], int], Any]


def _call_id(request: Any) -> str:
    call = getattr(request, "tool_call", None)
    return f"[{call['id']}]" if isinstance(call, dict) else ""


def _lifecycle(
    name: str, hook: str, log: list[str], on: dict[str, Behaviour], counts: dict[str, int]
):
    def run(state: dict[str, Any]) -> Any:
        counts[hook] = counts.get(hook, 0) + 1
        log.append(f"{name}.{hook}")
        behaviour = on.get(hook)
        return behaviour(state, counts[hook]) if behaviour else None

    def sync_hook(self: AgentMiddleware[Any, Any], state: Any, runtime: Any) -> Any:
        return run(state)

    async def async_hook(self: AgentMiddleware[Any, Any], state: Any, runtime: Any) -> Any:
        return run(state)

    return sync_hook, async_hook


def probe(
    name: str,
    log: list[str],
    *,
    hooks: Sequence[str] = LIFECYCLE,
    wraps: Sequence[str] = ("model", "tool"),
    fusable: bool | None = True,
    sync: bool = True,
    async_: bool = True,
    jumps: dict[str, list[str]] | None = None,
    on: dict[str, Behaviour] | None = None,
    state_schema: type[Any] | None = None,
    tools: Sequence[Any] = (),
    wrap_behaviour: dict[str, Callable[..., Any]] | None = None,
) -> AgentMiddleware[Any, Any]:
    on = dict(on or {})
    counts: dict[str, int] = {}
    namespace: dict[str, Any] = {}
    for hook in hooks:
        sync_hook, async_hook = _lifecycle(name, hook, log, on, counts)
        for method, function, wanted in ((hook, sync_hook, sync), (f"a{hook}", async_hook, async_)):
            if not wanted:
                continue
            if jumps and hook in jumps:
                function.__can_jump_to__ = list(jumps[hook])  # type: ignore[attr-defined]
            namespace[method] = function
    custom = dict(wrap_behaviour or {})
    for family in wraps:
        method = f"wrap_{family}_call"

        def sync_wrap(self: Any, request: Any, handler: Any, _m: str = method) -> Any:
            log.append(f"{name}.{_m}:in{_call_id(request)}")
            result = custom[_m](request, handler) if _m in custom else handler(request)
            log.append(f"{name}.{_m}:out{_call_id(request)}")
            return result

        async def async_wrap(self: Any, request: Any, handler: Any, _m: str = method) -> Any:
            log.append(f"{name}.{_m}:in{_call_id(request)}")
            if f"a{_m}" in custom:
                result = await custom[f"a{_m}"](request, handler)
            else:
                result = await handler(request)
            log.append(f"{name}.{_m}:out{_call_id(request)}")
            return result

        if sync:
            namespace[method] = sync_wrap
        if async_:
            namespace[f"a{method}"] = async_wrap
    if fusable is not None:
        namespace["deerflow_fusable"] = fusable
    if state_schema is not None:
        namespace["state_schema"] = state_schema
    cls = type(name, (AgentMiddleware,), namespace)
    instance = cls()
    instance.tools = list(tools)
    return instance
