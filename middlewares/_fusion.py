"""Fusing the middleware chain: the naive composition's semantics at a fraction of its cost.

Why this exists: ``create_agent`` composes middleware in a way whose overhead
grows with the chain. Every ``wrap_*`` hook is wrapped in a LangSmith
``traceable`` span that hops to a worker thread twice per call even with
tracing off, and every ``before_*``/``after_*`` hook becomes its own graph node,
so its own superstep (and checkpoint write). With the spec's 40-entry chain
that overhead dwarfs a model step (``bench/chain_overhead.py`` measures it).

``fuse_middlewares(chain)`` returns a list to hand to ``create_agent`` instead
of ``chain``. It dispatches exactly as the naive composition does:

- **Wrap hooks** of every member are composed by langchain's own chaining
  functions (first registered outermost, commands accumulated inner-first)
  into one ``MiddlewareChain`` middleware. Its hooks are plain functions that
  return the composed coroutine, so ``create_agent``'s span wrapper takes its
  synchronous path: no thread hops, one cheap no-op when tracing is off.
- **Lifecycle hooks** (``before_agent``, ``before_model``, ``after_model``,
  ``after_agent``) of consecutive *fusable* members run inside one node. The
  node replays LangGraph's superstep rules in memory with the graph's own
  channel classes: each hook sees the state as updated by the hooks before it
  (reducers applied, ``jump_to`` cleared unless just written), a declared
  ``jump_to`` leaves the group to the same destination the naive edge would
  take (a jump back to the group's own first hook restarts the group in
  place), and an undeclared destination raises the same ``KeyError``. The node
  then emits writes whose application yields the same channel values.
- **Everything else is untouched**: the model node, the tool node, tool
  interrupts and ``Command(goto=...)`` from tools, the state schema (merged in
  the same order), middleware tools (same order) and stream transformers.

A member is *fusable* when its class says ``deerflow_fusable = True``, or,
when it says nothing, when it is one of this project's built-in middlewares
(defined under the ``middlewares`` package). The contract a fusable member
keeps: its ``before_*``/``after_*`` hooks never call ``interrupt()`` and never
return a ``Command`` with ``goto``/``graph``/``resume`` (one that does raises
``FusionContractError``). A non-fusable member keeps its own graph nodes under
its own name, so an interrupt inside one of its hooks behaves exactly as in the
naive graph. Two differences remain, both outside normal operation and
documented in ``bench/results/chain_overhead.md``: when a hook *raises*, the
updates of the earlier hooks of its group are not checkpointed (the run fails
either way), and hooks of one group share the group's node name in stream
metadata.

``compose_chain`` picks the composition for one agent build: the naive one
when LangSmith tracing could be on (traces then have exactly the naive spans)
or when ``DEERFLOW_CHAIN_FUSION`` is false, the fused one otherwise. If tracing
turns on after the build, member spans are still emitted, nested as in the
naive trace, under one extra ``MiddlewareChain`` span.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast, get_type_hints

from langchain.agents.factory import (
    _chain_async_model_call_handlers,
    _chain_async_tool_call_wrappers,
    _chain_model_call_handlers,
    _chain_tool_call_wrappers,
    _get_can_jump_to,
    _wrap_trace_kwargs,
)
from langchain.agents.middleware import AgentMiddleware
from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables import RunnableConfig
from langchain_core.tracers.langchain import LangChainTracer
from langgraph.channels import (
    AnyValue,
    BaseChannel,
    BinaryOperatorAggregate,
    DeltaChannel,
    EphemeralValue,
    LastValue,
    LastValueAfterFinish,
    UntrackedValue,
)
from langgraph.config import get_config
from langgraph.errors import (
    EmptyChannelError,
    GraphBubbleUp,
    GraphRecursionError,
    InvalidUpdateError,
)
from langgraph.graph import StateGraph
from langgraph.types import Command, Overwrite
from langsmith import traceable
from langsmith.utils import tracing_is_enabled

__all__ = [
    "FUSABLE_ATTRIBUTE",
    "LIFECYCLE_HOOKS",
    "FusionContractError",
    "compose_chain",
    "fuse_middlewares",
    "fusion_enabled",
    "is_fusable",
    "tracing_possible",
]

logger = logging.getLogger(__name__)

FUSABLE_ATTRIBUTE = "deerflow_fusable"
LIFECYCLE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")
_BEFORE = frozenset({"before_agent", "before_model"})
_WRAP_HOOKS = (("wrap_model_call", "awrap_model_call"), ("wrap_tool_call", "awrap_tool_call"))
_REDUCER_CHANNELS = (BinaryOperatorAggregate, DeltaChannel)
_FINAL_VALUE_CHANNELS = (LastValue, LastValueAfterFinish, EphemeralValue, AnyValue, UntrackedValue)
_STEP_SENSITIVE_CHANNELS = (EphemeralValue,)
_DEFAULT_RECURSION_LIMIT = 9_999
CHAIN_NAME = "MiddlewareChain"


class FusionContractError(RuntimeError):
    """A fused hook did something only a graph node of its own can do."""


# --- deciding ----------------------------------------------------------------


def is_fusable(middleware: AgentMiddleware[Any, Any]) -> bool:
    """Whether ``middleware``'s lifecycle hooks may share a node with its neighbours."""
    declared = getattr(middleware, FUSABLE_ATTRIBUTE, None)
    if isinstance(declared, bool):
        return declared
    return type(middleware).__module__.partition(".")[0] == "middlewares"


def fusion_enabled() -> bool:
    """The operator's switch: ``DEERFLOW_CHAIN_FUSION`` (default on)."""
    raw = os.environ.get("DEERFLOW_CHAIN_FUSION", "").strip().lower()
    return raw not in {"0", "false", "no", "off"}


def tracing_possible(config: RunnableConfig | None = None) -> bool:
    """Whether a run built now could be traced to LangSmith."""
    if tracing_is_enabled():
        return True
    callbacks = (config or {}).get("callbacks")
    handlers: Iterable[Any]
    if isinstance(callbacks, BaseCallbackManager):
        handlers = callbacks.handlers
    elif isinstance(callbacks, list):
        handlers = callbacks
    else:
        handlers = ()
    return any(isinstance(handler, LangChainTracer) for handler in handlers)


def compose_chain(
    chain: Sequence[AgentMiddleware[Any, Any]],
    *,
    state_schema: type[Any],
    config: RunnableConfig | None = None,
) -> list[AgentMiddleware[Any, Any]]:
    """The middleware list for ``create_agent``: fused unless tracing or the switch says no."""
    if not fusion_enabled() or tracing_possible(config):
        return list(chain)
    return fuse_middlewares(chain, state_schema=state_schema)


def _overrides(middleware: AgentMiddleware[Any, Any], name: str) -> bool:
    return getattr(type(middleware), name) is not getattr(AgentMiddleware, name)


def _has_hook(middleware: AgentMiddleware[Any, Any], hook: str) -> bool:
    return _overrides(middleware, hook) or _overrides(middleware, f"a{hook}")


def _tracing_now() -> bool:
    return bool(tracing_is_enabled())


# --- the merged state schema and its channels --------------------------------


def _merged_schema(schemas: Sequence[type[Any]], name: str) -> type[Any]:
    """Annotations of ``schemas`` merged in order, later ones winning (as create_agent does)."""
    annotations: dict[str, Any] = {}
    for schema in schemas:
        annotations.update(get_type_hints(schema, include_extras=True))
    return cast("type[Any]", TypedDict(name, annotations))  # type: ignore[operator]


def _channels_for(schema: type[Any]) -> dict[str, BaseChannel]:
    return dict(StateGraph(schema).channels)


# --- the composite wrap middleware -------------------------------------------


class _ChainWrapsBase(AgentMiddleware[Any, Any, Any]):
    """Carries the whole chain's wrap hooks, tools, state schema and transformers."""

    def __init__(
        self,
        members: Sequence[AgentMiddleware[Any, Any]],
        state_schema: type[Any],
    ) -> None:
        super().__init__()
        self.members = tuple(members)
        self.state_schema = state_schema
        self.tools = [tool for m in members for tool in getattr(m, "tools", ())]
        self.transformers = tuple(t for m in members for t in getattr(m, "transformers", ()))
        model = [m for m in members if _has_hook(m, "wrap_model_call")]
        tool = [m for m in members if _has_hook(m, "wrap_tool_call")]
        self.model_members = tuple(model)
        self.tool_members = tuple(tool)
        # Exactly the chaining create_agent applies (first outermost, commands inner-first).
        self._model: Any = _chain_model_call_handlers([m.wrap_model_call for m in model])
        self._amodel: Any = _chain_async_model_call_handlers([m.awrap_model_call for m in model])
        self._tool: Any = _chain_tool_call_wrappers([m.wrap_tool_call for m in tool])
        self._atool: Any = _chain_async_tool_call_wrappers([m.awrap_tool_call for m in tool])

    @property
    def name(self) -> str:
        return CHAIN_NAME

    @functools.cached_property
    def _traced(self) -> dict[str, Any]:
        """The naive composition, each hook in its own span (used only while tracing)."""

        def traced(m: AgentMiddleware[Any, Any], attr: str) -> Any:
            return traceable(name=f"{m.name}.{attr}", **_wrap_trace_kwargs(m))(getattr(m, attr))

        model, tool = self.model_members, self.tool_members
        return {
            "model": _chain_model_call_handlers([traced(m, "wrap_model_call") for m in model]),
            "amodel": _chain_async_model_call_handlers(
                [traced(m, "awrap_model_call") for m in model]
            ),
            "tool": _chain_tool_call_wrappers([traced(m, "wrap_tool_call") for m in tool]),
            "atool": _chain_async_tool_call_wrappers([traced(m, "awrap_tool_call") for m in tool]),
        }


def _wrap_model_call(self: _ChainWrapsBase, request: Any, handler: Any) -> Any:
    composed = self._traced["model"] if _tracing_now() else self._model
    return composed(request, handler)


def _awrap_model_call(self: _ChainWrapsBase, request: Any, handler: Any) -> Awaitable[Any]:
    # A plain function returning the coroutine: create_agent's span wrapper then
    # takes its synchronous path, which costs nothing when tracing is off.
    composed = self._traced["amodel"] if _tracing_now() else self._amodel
    return cast("Awaitable[Any]", composed(request, handler))


def _wrap_tool_call(self: _ChainWrapsBase, request: Any, handler: Any) -> Any:
    composed = self._traced["tool"] if _tracing_now() else self._tool
    return composed(request, handler)


def _awrap_tool_call(self: _ChainWrapsBase, request: Any, handler: Any) -> Awaitable[Any]:
    composed = self._traced["atool"] if _tracing_now() else self._atool
    return cast("Awaitable[Any]", composed(request, handler))


@functools.cache
def _wraps_class(with_model: bool, with_tool: bool) -> type[_ChainWrapsBase]:
    """A subclass overriding exactly the wrap families some member has (create_agent checks)."""
    namespace: dict[str, Any] = {}
    if with_model:
        namespace["wrap_model_call"] = _wrap_model_call
        namespace["awrap_model_call"] = _awrap_model_call
    if with_tool:
        namespace["wrap_tool_call"] = _wrap_tool_call
        namespace["awrap_tool_call"] = _awrap_tool_call
    return type("MiddlewareChain", (_ChainWrapsBase,), namespace)


# --- non-fusable members: their own nodes, without their wrap hooks ----------


class _LifecycleProxyBase(AgentMiddleware[Any, Any, Any]):
    """A non-fusable member's lifecycle hooks, under its own name (same node names)."""

    def __init__(self, inner: AgentMiddleware[Any, Any]) -> None:
        super().__init__()
        self.inner = inner
        self.tools = []
        self.trace_policy = inner.trace_policy

    @property
    def name(self) -> str:
        return self.inner.name


def _delegate(method: str, jumps: list[str] | None) -> Callable[..., Any]:
    if method.startswith("a"):

        async def adelegate(self: _LifecycleProxyBase, state: Any, runtime: Any) -> Any:
            return await getattr(self.inner, method)(state, runtime)

        function: Callable[..., Any] = adelegate
    else:

        def delegate(self: _LifecycleProxyBase, state: Any, runtime: Any) -> Any:
            return getattr(self.inner, method)(state, runtime)

        function = delegate
    function.__name__ = method
    if jumps:
        function.__can_jump_to__ = list(jumps)  # type: ignore[attr-defined]
    return function


@functools.cache
def _proxy_class(signature: tuple[tuple[str, tuple[str, ...] | None], ...]) -> type[Any]:
    namespace = {
        method: _delegate(method, list(jumps) if jumps is not None else None)
        for method, jumps in signature
    }
    return type("LifecycleProxy", (_LifecycleProxyBase,), namespace)


def _lifecycle_proxy(inner: AgentMiddleware[Any, Any]) -> AgentMiddleware[Any, Any]:
    signature: list[tuple[str, tuple[str, ...] | None]] = []
    for hook in LIFECYCLE_HOOKS:
        for method in (hook, f"a{hook}"):
            if _overrides(inner, method):
                attribute = getattr(type(inner), method)
                jumps = getattr(attribute, "__can_jump_to__", None)
                signature.append((method, tuple(jumps) if jumps is not None else None))
    return cast("AgentMiddleware[Any, Any]", _proxy_class(tuple(signature))(inner))


# --- fused lifecycle groups ---------------------------------------------------


@dataclass(frozen=True)
class _Member:
    middleware: AgentMiddleware[Any, Any]
    jumps: tuple[str, ...]
    sync: Callable[..., Any] | None
    async_: Callable[..., Awaitable[Any]] | None
    is_loop_entry: bool
    is_loop_exit: bool

    @property
    def label(self) -> str:
        return self.middleware.name


@dataclass(frozen=True)
class _GroupSpec:
    hook: str
    members: tuple[_Member, ...]  # in execution order
    channels: dict[str, BaseChannel]
    restarts_on: str | None  # the jump that targets this group's first hook, if any


def _resolve(value: Any) -> str | None:
    return value if value in ("model", "end", "tools") else None


class _Simulation:
    """LangGraph's superstep rules, replayed in memory over one node's input state."""

    __slots__ = ("channels", "log", "protos", "values")

    def __init__(self, protos: dict[str, BaseChannel], state: dict[str, Any]) -> None:
        self.protos = protos
        self.values = dict(state)
        self.channels: dict[str, BaseChannel] = {}
        self.log: list[list[tuple[str, Any]]] = []

    def _channel(self, key: str) -> BaseChannel:
        channel = self.channels.get(key)
        if channel is None:
            proto = self.protos[key]
            channel = (
                proto.from_checkpoint(self.values[key]) if key in self.values else proto.copy()
            )
            self.channels[key] = channel
        return channel

    def _refresh(self, key: str, channel: BaseChannel) -> None:
        try:
            self.values[key] = channel.get()
        except EmptyChannelError:
            self.values.pop(key, None)

    def step(self, writes: list[tuple[str, Any]]) -> None:
        grouped: dict[str, list[Any]] = {}
        for key, value in writes:
            grouped.setdefault(key, []).append(value)
        for key, values in grouped.items():
            channel = self._channel(key)
            channel.update(values)
            self._refresh(key, channel)
        for key, proto in self.protos.items():
            if key in grouped or not isinstance(proto, _STEP_SENSITIVE_CHANNELS):
                continue
            if key in self.values or key in self.channels:
                channel = self._channel(key)
                if channel.update([]):
                    self._refresh(key, channel)
        self.log.append(writes)

    def output(self) -> dict[str, Any] | list[Command[Any]] | None:
        """Writes that, applied in one superstep, give the simulated channel values."""
        per_key: dict[str, list[Any]] = {}
        for writes in self.log:
            for key, value in writes:
                per_key.setdefault(key, []).append(value)
        if not per_key:
            return None
        final: dict[str, Any] = {}
        raw_keys: set[str] = set()
        for key, values in per_key.items():
            proto = self.protos[key]
            if len(values) == 1 and not isinstance(proto, _FINAL_VALUE_CHANNELS):
                raw_keys.add(key)
            elif isinstance(proto, _REDUCER_CHANNELS):
                if any(isinstance(v, Overwrite) for v in values):
                    final[key] = Overwrite(self.values.get(key))
                else:
                    raw_keys.add(key)
            elif isinstance(proto, _FINAL_VALUE_CHANNELS):
                if key in self.values:
                    final[key] = self.values[key]
            else:
                raw_keys.add(key)
        if all(len(per_key[k]) == 1 for k in raw_keys):
            merged = {k: per_key[k][0] for k in raw_keys}
            merged.update(final)
            return merged or None
        commands: list[Command[Any]] = []
        for writes in self.log:
            own = [(k, v) for k, v in writes if k in raw_keys]
            if not own:
                continue
            keys = [k for k, _ in own]
            update: Any = dict(own) if len(set(keys)) == len(keys) else own
            commands.append(Command(update=update))
        if final:
            commands.append(Command(update=final))
        return commands


class _FusedGroupBase(AgentMiddleware[Any, Any, Any]):
    """Consecutive fusable lifecycle hooks, one graph node per family it implements.

    When the same members form a group in several families (the common case),
    one instance implements all of them, so node names stay readable:
    ``A+B+C.before_model``, ``A+B+C.after_model``; a group of one keeps the
    member's own node name.
    """

    def __init__(self, specs: dict[str, _GroupSpec], name: str) -> None:
        super().__init__()
        self.specs = specs
        self._name = name
        self.tools = []
        self._keys = frozenset(next(iter(specs.values())).channels)

    @property
    def name(self) -> str:
        return self._name

    @property
    def members(self) -> tuple[AgentMiddleware[Any, Any], ...]:
        seen: dict[int, AgentMiddleware[Any, Any]] = {}
        for spec in self.specs.values():
            for member in spec.members:
                seen.setdefault(id(member.middleware), member.middleware)
        return tuple(seen.values())

    def _writes(self, hook: str, member: _Member, result: Any) -> list[tuple[str, Any]]:
        if result is None:
            return []
        if isinstance(result, dict):
            return [(k, v) for k, v in result.items() if k in self._keys]
        items = result if isinstance(result, (list, tuple)) else [result]
        if items and all(isinstance(i, (Command, dict)) for i in items):
            writes: list[tuple[str, Any]] = []
            for item in items:
                if isinstance(item, dict):
                    writes.extend((k, v) for k, v in item.items() if k in self._keys)
                    continue
                if item.goto or item.graph is not None or item.resume is not None:
                    raise FusionContractError(
                        f"{member.label}.{hook} returned a Command with goto, graph or resume, "
                        f"which a fused hook cannot honour; set `{FUSABLE_ATTRIBUTE} = False` "
                        f"on {type(member.middleware).__name__}"
                    )
                writes.extend((k, v) for k, v in item._update_as_tuples() if k in self._keys)
            return writes
        raise InvalidUpdateError(f"Expected dict, got {result}")

    def _decide(
        self, spec: _GroupSpec, index: int, member: _Member, writes: list[tuple[str, Any]]
    ) -> str | None:
        """``"exit"``, ``"restart"`` or None (go on), as the naive edge after ``member``."""
        written = [v for k, v in writes if k == "jump_to"]
        target = _resolve(written[-1]) if written else None
        if target is None:
            return None
        if member.is_loop_exit:
            return "exit"
        if not member.jumps:
            return None
        allowed = target in member.jumps and not (target == "model" and member.is_loop_entry)
        if not allowed:
            raise KeyError(_naive_destination(spec, index, target))
        return "restart" if target == spec.restarts_on else "exit"

    @staticmethod
    def _limit() -> int:
        try:
            return int(get_config().get("recursion_limit", _DEFAULT_RECURSION_LIMIT))
        except RuntimeError:
            return _DEFAULT_RECURSION_LIMIT

    @staticmethod
    def _traced(hook: str, member: _Member, function: Callable[..., Any]) -> Callable[..., Any]:
        return cast(
            "Callable[..., Any]",
            traceable(name=f"{member.label}.{hook}", run_type="chain")(function),
        )

    def _advance(
        self,
        spec: _GroupSpec,
        index: int,
        member: _Member,
        writes: list[tuple[str, Any]],
        steps: int,
    ) -> int | None:
        """The next member index, or None when the group is done."""
        decision = self._decide(spec, index, member, writes)
        if decision == "exit":
            return None
        if decision == "restart":
            limit = self._limit()
            if steps >= limit:
                raise GraphRecursionError(f"Recursion limit of {limit} reached in {self.name}")
            return 0
        return index + 1 if index + 1 < len(spec.members) else None

    def _run_sync(self, hook: str, state: dict[str, Any], runtime: Any) -> Any:
        spec = self.specs[hook]
        simulation = _Simulation(spec.channels, state)
        tracing = _tracing_now()
        steps = 0
        index: int | None = 0
        while index is not None:
            member = spec.members[index]
            if member.sync is None:
                raise TypeError(f'No synchronous function provided to "{member.label}.{hook}".')
            function = self._traced(hook, member, member.sync) if tracing else member.sync
            result = _call_guarded(member, hook, function, simulation, runtime)
            writes = self._writes(hook, member, result)
            simulation.step(writes)
            steps += 1
            index = self._advance(spec, index, member, writes, steps)
        return simulation.output()

    async def _run_async(self, hook: str, state: dict[str, Any], runtime: Any) -> Any:
        spec = self.specs[hook]
        simulation = _Simulation(spec.channels, state)
        tracing = _tracing_now()
        steps = 0
        index: int | None = 0
        while index is not None:
            member = spec.members[index]
            if member.async_ is not None:
                function: Callable[..., Any] = member.async_
                if tracing:
                    function = self._traced(hook, member, function)
                result = await _acall_guarded(member, hook, function, simulation, runtime)
            else:
                assert member.sync is not None
                function = self._traced(hook, member, member.sync) if tracing else member.sync
                result = _call_guarded(member, hook, function, simulation, runtime)
            writes = self._writes(hook, member, result)
            simulation.step(writes)
            steps += 1
            index = self._advance(spec, index, member, writes, steps)
        return simulation.output()


def _warn_interrupt(member: _Member, hook: str) -> None:
    logger.warning(
        "%s.%s interrupted inside a fused node; fused hooks must not interrupt "
        "(set `%s = False` on the class to give it its own nodes)",
        member.label,
        hook,
        FUSABLE_ATTRIBUTE,
    )


def _call_guarded(
    member: _Member, hook: str, function: Callable[..., Any], simulation: _Simulation, runtime: Any
) -> Any:
    try:
        return function(dict(simulation.values), runtime)
    except GraphBubbleUp:
        _warn_interrupt(member, hook)
        raise


async def _acall_guarded(
    member: _Member, hook: str, function: Callable[..., Any], simulation: _Simulation, runtime: Any
) -> Any:
    try:
        return await function(dict(simulation.values), runtime)
    except GraphBubbleUp:
        _warn_interrupt(member, hook)
        raise


def _naive_destination(spec: _GroupSpec, index: int, target: str) -> str:
    if target == "tools":
        return "tools"
    if target == "model" and spec.members[index].is_loop_entry:
        return f"{spec.members[index].label}.before_model"
    return target


def _group_methods(hook: str, jumps: tuple[str, ...]) -> dict[str, Any]:
    def sync_hook(self: _FusedGroupBase, state: Any, runtime: Any) -> Any:
        return self._run_sync(hook, state, runtime)

    async def async_hook(self: _FusedGroupBase, state: Any, runtime: Any) -> Any:
        return await self._run_async(hook, state, runtime)

    sync_hook.__name__ = hook
    async_hook.__name__ = f"a{hook}"
    methods: dict[str, Any] = {hook: sync_hook, f"a{hook}": async_hook}
    if jumps:
        for function in methods.values():
            function.__can_jump_to__ = list(jumps)
    return methods


@functools.cache
def _group_class(signature: tuple[tuple[str, tuple[str, ...]], ...]) -> type[_FusedGroupBase]:
    """A subclass implementing exactly ``(hook, can_jump_to)`` for each family it fuses."""
    namespace: dict[str, Any] = {}
    for hook, jumps in signature:
        namespace.update(_group_methods(hook, jumps))
    return type("FusedHooks", (_FusedGroupBase,), namespace)


# --- assembling the fused list ------------------------------------------------


def _execution_order(hook: str, items: list[Any]) -> list[Any]:
    return items if hook in _BEFORE else list(reversed(items))


def _split_groups(hook: str, run: list[_Member]) -> list[list[_Member]]:
    """Trailing undeclared hooks get their own group: only declared jumps may route."""
    if not run:
        return []
    if any(m.is_loop_exit for m in run):
        return [run]
    last_declared = max((i for i, m in enumerate(run) if m.jumps), default=-1)
    if last_declared in (-1, len(run) - 1):
        return [run]
    return [run[: last_declared + 1], run[last_declared + 1 :]]


def fuse_middlewares(
    chain: Sequence[AgentMiddleware[Any, Any]],
    *,
    state_schema: type[Any],
) -> list[AgentMiddleware[Any, Any]]:
    """The fused equivalent of ``chain`` for ``create_agent(..., state_schema=state_schema)``."""
    chain = list(chain)
    if not chain:
        return []
    if len({m.name for m in chain}) != len(chain):
        raise AssertionError("Please remove duplicate middleware instances.")
    member_schema = _merged_schema([m.state_schema for m in chain], "ChainState")
    channels = _channels_for(_merged_schema([member_schema, state_schema], "FusedState"))
    wraps_cls = _wraps_class(
        any(_has_hook(m, "wrap_model_call") for m in chain),
        any(_has_hook(m, "wrap_tool_call") for m in chain),
    )
    wraps = wraps_cls(chain, member_schema)

    fusable = {id(m): is_fusable(m) for m in chain}
    proxies = {
        id(m): _lifecycle_proxy(m)
        for m in chain
        if not fusable[id(m)] and any(_has_hook(m, h) for h in LIFECYCLE_HOOKS)
    }
    first_before_model = next((m for m in chain if _has_hook(m, "before_model")), None)
    first_after_model = next((m for m in chain if _has_hook(m, "after_model")), None)
    first_exec_after_agent = next((m for m in reversed(chain) if _has_hook(m, "after_agent")), None)

    # Per anchor (the proxy a group follows in registration order; None = before
    # any), the fused groups to place there: (family, member key, spec).
    buckets: dict[int | None, list[tuple[str, tuple[int, ...], _GroupSpec]]] = {}
    for hook in LIFECYCLE_HOOKS:
        participants = [m for m in chain if _has_hook(m, hook)]
        units: list[tuple[str, Any]] = []  # execution order: ("proxy", m) | ("group", members)
        run: list[_Member] = []
        for m in _execution_order(hook, participants):
            if not fusable[id(m)]:
                units.extend(("group", g) for g in _split_groups(hook, run))
                run = []
                units.append(("proxy", m))
                continue
            run.append(
                _Member(
                    middleware=m,
                    jumps=tuple(_get_can_jump_to(m, hook)),
                    sync=getattr(m, hook) if _overrides(m, hook) else None,
                    async_=getattr(m, f"a{hook}") if _overrides(m, f"a{hook}") else None,
                    is_loop_entry=hook == "before_model" and m is first_before_model,
                    is_loop_exit=hook == "after_model" and m is first_after_model,
                )
            )
        units.extend(("group", g) for g in _split_groups(hook, run))
        anchor: int | None = None
        for kind, value in units if hook in _BEFORE else list(reversed(units)):
            if kind == "proxy":
                anchor = id(value)
                continue
            members = tuple(value)
            restarts_on = None
            if hook == "before_model" and members[0].middleware is first_before_model:
                restarts_on = "model"
            elif hook == "after_agent" and members[0].middleware is first_exec_after_agent:
                restarts_on = "end"
            key = tuple(sorted(id(m.middleware) for m in members))
            spec = _GroupSpec(hook, members, channels, restarts_on)
            buckets.setdefault(anchor, []).append((hook, key, spec))

    position = {id(m): i for i, m in enumerate(chain)}
    used_names = {p.name for p in proxies.values()} | {CHAIN_NAME}
    placed: dict[int | None, list[AgentMiddleware[Any, Any]]] = {}
    for anchor, entries in buckets.items():
        slots: list[tuple[tuple[int, ...], dict[str, _GroupSpec]]] = []
        for hook, key, spec in entries:
            # Merge into an earlier slot with the same members only if no later
            # slot of this bucket already holds this family (its order must hold).
            target = None
            for i, (slot_key, specs) in enumerate(slots):
                if (
                    slot_key == key
                    and hook not in specs
                    and not any(hook in later for _, later in slots[i + 1 :])
                ):
                    target = specs
                    break
            if target is None:
                slots.append((key, {hook: spec}))
            else:
                target[hook] = spec
        for key, specs in slots:
            ordered = sorted(key, key=position.__getitem__)
            labels = [chain[position[k]].name for k in ordered]
            name = "+".join(labels)
            if name in used_names:
                suffix = 2
                while f"{name}~{suffix}" in used_names:
                    suffix += 1
                name = f"{name}~{suffix}"
            used_names.add(name)
            signature = tuple(
                (hook, tuple(dict.fromkeys(j for m in spec.members for j in m.jumps)))
                for hook, spec in specs.items()
            )
            placed.setdefault(anchor, []).append(_group_class(signature)(specs, name))

    result: list[AgentMiddleware[Any, Any]] = [wraps, *placed.get(None, ())]
    for m in chain:
        if id(m) in proxies:
            result.append(proxies[id(m)])
            result.extend(placed.get(id(m), ()))
    return result
