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
  synchronous path: no thread hops, a cheap no-op when tracing is off.
- **Lifecycle hooks** (``before_agent``, ``before_model``, ``after_model``,
  ``after_agent``) of consecutive *fusable* members run inside one node. The
  node replays LangGraph's superstep rules in memory with the graph's own
  channel classes: each hook sees the state as updated by the hooks before it
  (reducers applied, ``jump_to`` cleared unless just written), a declared
  ``jump_to`` leaves the group to the same destination the naive edge would
  take (a jump back to the group's own first hook restarts the group in
  place), and an undeclared destination raises the same ``KeyError``. The node
  then emits writes whose application yields the same channel values.
- **after_model folding** (``fold_after_model=True``, when the agent has a tool
  node and every ``after_model`` member is fusable): the ``after_model`` hooks
  run inside the model node, right after the composed wrap chain returns, on the
  state the model node's own writes produce; their writes follow the model's in
  the same superstep, and the model node's routing edge reads their
  ``jump_to`` exactly as the naive loop-exit edge does. One superstep less per
  step.
- **Everything else is untouched**: the model call, the tool node, tool
  interrupts and ``Command(goto=...)`` from tools, the state schema (merged in
  the same order), middleware tools (same order) and stream transformers.

A member is *fusable* only when its class opts in with
``deerflow_fusable = True`` (every built-in middleware does). The contract a fusable member
keeps: its ``before_*``/``after_*`` hooks never call ``interrupt()`` and never
return a ``Command`` with ``goto``/``graph``/``resume`` (one that does raises
``FusionContractError``; an interrupt is logged). A non-fusable member keeps
its own graph nodes under its own name, so an interrupt inside one of its hooks
behaves exactly as in the naive graph.

What differs, by design and outside normal operation: when a fused hook
*raises*, the writes made since the last real node boundary (earlier hooks of
its group; with folding, the model's answer) are not checkpointed; the run
fails either way. Stream metadata (``langgraph_node``) and ``updates`` events
name the fused node instead of each member; ``values`` snapshots come once per
fused node.

``compose_chain`` picks the composition for one agent build: the naive one
when LangSmith tracing could be on (traces then have exactly the naive spans)
or when ``DEERFLOW_CHAIN_FUSION`` is false, the fused one otherwise. If tracing
turns on after the build, member spans are still emitted, nested as in the
naive trace, under one extra ``MiddlewareChain`` span.

Fusion replays ``create_agent`` with nine private helpers of
``langchain.agents.factory``. They are imported lazily, in ``_load_factory``
only, after a version check (``TESTED_LANGCHAIN``) and a signature check of
``_build_commands``; if anything is missing or changed, ``compose_chain``
logs one warning and returns the naive chain: slower, never down.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast, get_type_hints

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
from typing_extensions import TypedDict

__all__ = [
    "CHAIN_NAME",
    "FUSABLE_ATTRIBUTE",
    "LIFECYCLE_HOOKS",
    "TESTED_LANGCHAIN",
    "FusionContractError",
    "FusionUnavailableError",
    "compose_chain",
    "fuse_middlewares",
    "fusion_enabled",
    "is_fusable",
    "tracing_possible",
]

logger = logging.getLogger(__name__)

CHAIN_NAME = "MiddlewareChain"
FUSABLE_ATTRIBUTE = "deerflow_fusable"
LIFECYCLE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")
_BEFORE = frozenset({"before_agent", "before_model"})
_REDUCER_CHANNELS = (BinaryOperatorAggregate, DeltaChannel)
_FINAL_VALUE_CHANNELS = (LastValue, LastValueAfterFinish, EphemeralValue, AnyValue, UntrackedValue)
_STEP_SENSITIVE_CHANNELS = (EphemeralValue,)
_DEFAULT_RECURSION_LIMIT = 9_999


class FusionContractError(RuntimeError):
    """A fused hook did something only a graph node of its own can do."""


class FusionUnavailableError(RuntimeError):
    """The installed LangChain lacks (or changed) a private name fusion relies on."""


# --- the one place that touches langchain's private factory internals --------

TESTED_LANGCHAIN = ("1.5",)
"""``major.minor`` versions of ``langchain`` the fused chain was proven against
(``tests/middlewares/test_fusion.py``); any other falls back to the naive chain."""

_FACTORY_NAMES = (
    "_build_commands",
    "_chain_async_model_call_handlers",
    "_chain_async_tool_call_wrappers",
    "_chain_model_call_handlers",
    "_chain_tool_call_wrappers",
    "_ComposedExtendedModelResponse",
    "_get_can_jump_to",
    "_normalize_to_model_response",
    "_wrap_trace_kwargs",
)
# Keyword arguments of ``_build_commands`` the fused model node passes: a new
# one means create_agent's model node changed what it emits.
_BUILD_COMMANDS_PARAMS = frozenset(
    {"model_response", "middleware_commands", "has_structured_output", "repaired_messages"}
)
_factory_lock = threading.Lock()
_factory_cache: SimpleNamespace | FusionUnavailableError | None = None
_warned = False


def _load_factory() -> SimpleNamespace:
    version = importlib.metadata.version("langchain")
    if ".".join(version.split(".")[:2]) not in TESTED_LANGCHAIN:
        raise FusionUnavailableError(
            f"langchain {version} is not a version the fused chain was tested with "
            f"({', '.join(TESTED_LANGCHAIN)}.x)"
        )
    try:
        factory = importlib.import_module("langchain.agents.factory")
    except ImportError as exc:  # pragma: no cover - langchain itself is a dependency
        raise FusionUnavailableError(f"langchain.agents.factory: {exc}") from exc
    missing = [name for name in _FACTORY_NAMES if not hasattr(factory, name)]
    if missing:
        raise FusionUnavailableError(
            f"langchain {version} has no {', '.join(missing)} in langchain.agents.factory"
        )
    params = set(inspect.signature(factory._build_commands).parameters)
    if params != _BUILD_COMMANDS_PARAMS:
        raise FusionUnavailableError(
            f"langchain {version} changed _build_commands{sorted(params)}; "
            "the fused model node would drift from create_agent's"
        )
    return SimpleNamespace(**{name.lstrip("_"): getattr(factory, name) for name in _FACTORY_NAMES})


def _factory() -> SimpleNamespace:
    """langchain's private factory helpers, checked once (raises ``FusionUnavailableError``)."""
    global _factory_cache
    cached = _factory_cache
    if cached is None:
        with _factory_lock:
            if _factory_cache is None:
                try:
                    _factory_cache = _load_factory()
                except FusionUnavailableError as exc:
                    _factory_cache = exc
            cached = _factory_cache
    if isinstance(cached, FusionUnavailableError):
        raise cached
    return cached


def _reset_factory() -> None:
    """Forget the check (tests that simulate another langchain)."""
    global _factory_cache, _warned
    with _factory_lock:
        _factory_cache = None
        _warned = False


# --- deciding ----------------------------------------------------------------


def is_fusable(middleware: AgentMiddleware[Any, Any]) -> bool:
    """Whether ``middleware``'s lifecycle hooks may share a node with its neighbours.

    Opt-in only: the class must say ``deerflow_fusable = True`` (a promise that
    its hooks never interrupt nor return ``Command(goto=...)``). Where a class
    lives says nothing about what its hooks do.
    """
    return getattr(middleware, FUSABLE_ATTRIBUTE, False) is True


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
    tools: Sequence[Any] = (),
) -> list[AgentMiddleware[Any, Any]]:
    """The middleware list for ``create_agent(model, tools, ...)``.

    Fused (with ``after_model`` folding when the agent will have a tool node)
    unless tracing could be on, the operator switched fusion off, or the
    installed LangChain is not one fusion was tested with (then one warning).
    """
    if not fusion_enabled() or tracing_possible(config):
        return list(chain)
    try:
        _factory()
    except FusionUnavailableError as exc:
        global _warned
        if not _warned:
            _warned = True
            logger.warning(
                "middleware fusion is off, the chain runs naive (slower, same behaviour): %s", exc
            )
        return list(chain)
    has_tool_node = bool(tools) or any(
        getattr(m, "tools", None) or _has_hook(m, "wrap_tool_call") for m in chain
    )
    return fuse_middlewares(chain, state_schema=state_schema, fold_after_model=has_tool_node)


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


@functools.lru_cache(maxsize=64)
def _schemas(
    member_schemas: tuple[type[Any], ...], state_schema: type[Any]
) -> tuple[type[Any], dict[str, BaseChannel], tuple[str, ...]]:
    """The members' merged schema, the graph's channel templates, the step-sensitive keys.

    Cached: agents are built per run from the same few schemas, and the channel
    templates are never mutated (simulations copy them).
    """
    member_schema = _merged_schema(member_schemas, "ChainState")
    merged = _merged_schema([member_schema, state_schema], "FusedState")
    channels = dict(StateGraph(merged).channels)
    sensitive = tuple(k for k, c in channels.items() if isinstance(c, _STEP_SENSITIVE_CHANNELS))
    return member_schema, channels, sensitive


# --- running a sequence of lifecycle hooks inside one node --------------------


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
    sensitive: tuple[str, ...]  # keys whose channel clears on a step without a write
    restarts_on: str | None  # the jump that targets this group's first hook, if any


def _resolve(value: Any) -> str | None:
    return value if value in ("model", "end", "tools") else None


class _Simulation:
    """LangGraph's superstep rules, replayed in memory over one node's input state."""

    __slots__ = ("channels", "log", "protos", "sensitive", "values")

    def __init__(
        self, protos: dict[str, BaseChannel], sensitive: tuple[str, ...], state: dict[str, Any]
    ) -> None:
        self.protos = protos
        self.sensitive = sensitive
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
        """Apply one superstep's writes, then clear what clears on an unwritten step."""
        grouped: dict[str, list[Any]] = {}
        if writes:
            for key, value in writes:
                grouped.setdefault(key, []).append(value)
            for key, values in grouped.items():
                channel = self._channel(key)
                channel.update(values)
                self._refresh(key, channel)
            self.log.append(writes)
        for key in self.sensitive:
            if key not in grouped and key in self.values:
                channel = self._channel(key)
                if channel.update([]):
                    self._refresh(key, channel)

    def output(self, start: int = 0) -> dict[str, Any] | list[Command[Any]] | None:
        """Writes that, applied in one superstep, give the simulated channel values.

        Only the steps from ``start`` on are emitted (earlier ones are written by
        someone else in the same superstep). Reducer channels get each write, in
        order, or one ``Overwrite`` of the final value when an overwrite is among
        several; last-value channels get their final value once.
        """
        log = self.log[start:]
        per_key: dict[str, list[Any]] = {}
        for writes in log:
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
        for writes in log:
            own = [(k, v) for k, v in writes if k in raw_keys]
            if not own:
                continue
            keys = [k for k, _ in own]
            update: Any = dict(own) if len(set(keys)) == len(keys) else own
            commands.append(Command(update=update))
        if final:
            commands.append(Command(update=final))
        return commands


def _writes(spec: _GroupSpec, member: _Member, result: Any) -> list[tuple[str, Any]]:
    """A hook's return value as channel writes, the way a node's return is read."""
    if result is None:
        return []
    keys = spec.channels
    if isinstance(result, dict):
        return [(k, v) for k, v in result.items() if k in keys]
    items = result if isinstance(result, (list, tuple)) else [result]
    if items and all(isinstance(i, (Command, dict)) for i in items):
        writes: list[tuple[str, Any]] = []
        for item in items:
            if isinstance(item, dict):
                writes.extend((k, v) for k, v in item.items() if k in keys)
                continue
            if item.goto or item.graph is not None or item.resume is not None:
                raise FusionContractError(
                    f"{member.label}.{spec.hook} returned a Command with goto, graph or resume, "
                    f"which a fused hook cannot honour; set `{FUSABLE_ATTRIBUTE} = False` "
                    f"on {type(member.middleware).__name__}"
                )
            writes.extend((k, v) for k, v in item._update_as_tuples() if k in keys)
        return writes
    raise InvalidUpdateError(f"Expected dict, got {result}")


def _naive_destination(member: _Member, target: str) -> str:
    if target == "model" and member.is_loop_entry:
        return f"{member.label}.before_model"
    return target


def _decide(spec: _GroupSpec, member: _Member, writes: list[tuple[str, Any]]) -> str | None:
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
        raise KeyError(_naive_destination(member, target))
    return "restart" if target == spec.restarts_on else "exit"


def _recursion_limit() -> int:
    try:
        return int(get_config().get("recursion_limit", _DEFAULT_RECURSION_LIMIT))
    except RuntimeError:
        return _DEFAULT_RECURSION_LIMIT


def _next(
    spec: _GroupSpec, index: int, member: _Member, writes: list[tuple[str, Any]], steps: int
) -> int | None:
    """The next member index, or None when the sequence is done."""
    if writes:
        decision = _decide(spec, member, writes)
        if decision == "exit":
            return None
        if decision == "restart":
            limit = _recursion_limit()
            if steps >= limit:
                raise GraphRecursionError(f"Recursion limit of {limit} reached in {spec.hook}")
            return 0
    return index + 1 if index + 1 < len(spec.members) else None


def _traced(spec: _GroupSpec, member: _Member, function: Callable[..., Any]) -> Callable[..., Any]:
    name = f"{member.label}.{spec.hook}"
    return cast("Callable[..., Any]", traceable(name=name, run_type="chain")(function))


def _warn_interrupt(spec: _GroupSpec, member: _Member) -> None:
    logger.warning(
        "%s.%s interrupted inside a fused node; fused hooks must not interrupt "
        "(set `%s = False` on the class to give it its own nodes)",
        member.label,
        spec.hook,
        FUSABLE_ATTRIBUTE,
    )


def _run_sync(spec: _GroupSpec, simulation: _Simulation, runtime: Any) -> None:
    tracing = _tracing_now()
    steps = 0
    index: int | None = 0
    while index is not None:
        member = spec.members[index]
        if member.sync is None:
            raise TypeError(f'No synchronous function provided to "{member.label}.{spec.hook}".')
        function = _traced(spec, member, member.sync) if tracing else member.sync
        try:
            result = function(dict(simulation.values), runtime)
        except GraphBubbleUp:
            _warn_interrupt(spec, member)
            raise
        writes = _writes(spec, member, result)
        simulation.step(writes)
        steps += 1
        index = _next(spec, index, member, writes, steps)


async def _run_async(spec: _GroupSpec, simulation: _Simulation, runtime: Any) -> None:
    tracing = _tracing_now()
    steps = 0
    index: int | None = 0
    while index is not None:
        member = spec.members[index]
        try:
            if member.async_ is not None:
                function: Callable[..., Any] = member.async_
                if tracing:
                    function = _traced(spec, member, function)
                result = await function(dict(simulation.values), runtime)
            else:
                assert member.sync is not None
                function = _traced(spec, member, member.sync) if tracing else member.sync
                result = function(dict(simulation.values), runtime)
        except GraphBubbleUp:
            _warn_interrupt(spec, member)
            raise
        writes = _writes(spec, member, result)
        simulation.step(writes)
        steps += 1
        index = _next(spec, index, member, writes, steps)


# --- the composite wrap middleware -------------------------------------------


def _command_writes(command: Command[Any]) -> list[tuple[str, Any]]:
    return list(command._update_as_tuples())


class _ChainWrapsBase(AgentMiddleware[Any, Any, Any]):
    """The whole chain's wrap hooks, tools, state schema, transformers (and folded after_model)."""

    def __init__(
        self,
        members: Sequence[AgentMiddleware[Any, Any]],
        state_schema: type[Any],
        after_model: _GroupSpec | None = None,
    ) -> None:
        super().__init__()
        self.members = tuple(members)
        self.state_schema = state_schema
        self.folded_after_model = after_model
        self.tools = [tool for m in members for tool in getattr(m, "tools", ())]
        self.transformers = tuple(t for m in members for t in getattr(m, "transformers", ()))
        model = [m for m in members if _has_hook(m, "wrap_model_call")]
        tool = [m for m in members if _has_hook(m, "wrap_tool_call")]
        lc = _factory()
        self.model_members = tuple(model)
        self.tool_members = tuple(tool)
        # Exactly the chaining create_agent applies (first outermost, commands inner-first).
        self._model: Any = lc.chain_model_call_handlers([m.wrap_model_call for m in model])
        self._amodel: Any = lc.chain_async_model_call_handlers([m.awrap_model_call for m in model])
        self._tool: Any = lc.chain_tool_call_wrappers([m.wrap_tool_call for m in tool])
        self._atool: Any = lc.chain_async_tool_call_wrappers([m.awrap_tool_call for m in tool])

    @property
    def name(self) -> str:
        return CHAIN_NAME

    @functools.cached_property
    def _traced_chains(self) -> dict[str, Any]:
        """The naive composition, each hook in its own span (used only while tracing)."""
        lc = _factory()

        def traced(m: AgentMiddleware[Any, Any], attr: str) -> Any:
            return traceable(name=f"{m.name}.{attr}", **lc.wrap_trace_kwargs(m))(getattr(m, attr))

        model, tool = self.model_members, self.tool_members
        return {
            "model": lc.chain_model_call_handlers([traced(m, "wrap_model_call") for m in model]),
            "amodel": lc.chain_async_model_call_handlers(
                [traced(m, "awrap_model_call") for m in model]
            ),
            "tool": lc.chain_tool_call_wrappers([traced(m, "wrap_tool_call") for m in tool]),
            "atool": lc.chain_async_tool_call_wrappers(
                [traced(m, "awrap_tool_call") for m in tool]
            ),
        }

    def _chain(self, key: str) -> Any:
        return self._traced_chains[key] if _tracing_now() else getattr(self, f"_{key}")

    # -- folding after_model into the model node --

    def _node_writes(
        self, request: Any, composed: Any
    ) -> tuple[Any, list[Command[Any]], _Simulation, int]:
        """The model node's own writes, simulated, as create_agent will emit them."""
        assert self.folded_after_model is not None
        lc = _factory()
        if isinstance(composed, lc.ComposedExtendedModelResponse):
            response, inner = composed.model_response, list(composed.commands)
        else:
            response, inner = lc.normalize_to_model_response(composed), []
        state = request.state
        repaired = request.messages if request.messages != state["messages"] else None
        # As create_agent's model node: with a response_format, a turn without a
        # structured answer clears the previous turn's ``structured_response``.
        node = lc.build_commands(
            response,
            inner,
            has_structured_output=request.response_format is not None,
            repaired_messages=repaired,
        )
        spec = self.folded_after_model
        simulation = _Simulation(spec.channels, spec.sensitive, state)
        simulation.step([w for command in node for w in _command_writes(command)])
        return response, inner, simulation, len(simulation.log)

    @staticmethod
    def _folded(
        response: Any, inner: list[Command[Any]], simulation: _Simulation, mark: int
    ) -> Any:
        """create_agent emits the answer first; ours follow: inner commands, then the hooks'."""
        lc = _factory()
        own = _Simulation(simulation.protos, simulation.sensitive, {})
        own.values = simulation.values
        own.log = [_command_writes(c) for c in inner] + simulation.log[mark:]
        extra = own.output()
        if extra is None:
            commands: list[Command[Any]] = []
        elif isinstance(extra, dict):
            commands = [Command(update=extra)]
        else:
            commands = extra
        return lc.ComposedExtendedModelResponse(model_response=response, commands=commands)

    def fold_sync(self, request: Any, handler: Any) -> Any:
        composed = self._chain("model")(request, handler) if self._model else handler(request)
        response, inner, simulation, mark = self._node_writes(request, composed)
        assert self.folded_after_model is not None
        _run_sync(self.folded_after_model, simulation, request.runtime)
        return self._folded(response, inner, simulation, mark)

    async def fold_async(self, request: Any, handler: Any) -> Any:
        if self._amodel:
            composed = await self._chain("amodel")(request, handler)
        else:
            composed = await handler(request)
        response, inner, simulation, mark = self._node_writes(request, composed)
        assert self.folded_after_model is not None
        await _run_async(self.folded_after_model, simulation, request.runtime)
        return self._folded(response, inner, simulation, mark)


def _wrap_model_call(self: _ChainWrapsBase, request: Any, handler: Any) -> Any:
    if self.folded_after_model is not None:
        return self.fold_sync(request, handler)
    return self._chain("model")(request, handler)


def _awrap_model_call(self: _ChainWrapsBase, request: Any, handler: Any) -> Awaitable[Any]:
    # A plain function returning the coroutine: create_agent's span wrapper then
    # takes its synchronous path, which costs little when tracing is off.
    if self.folded_after_model is not None:
        return self.fold_async(request, handler)
    return cast("Awaitable[Any]", self._chain("amodel")(request, handler))


def _wrap_tool_call(self: _ChainWrapsBase, request: Any, handler: Any) -> Any:
    return self._chain("tool")(request, handler)


def _awrap_tool_call(self: _ChainWrapsBase, request: Any, handler: Any) -> Awaitable[Any]:
    return cast("Awaitable[Any]", self._chain("atool")(request, handler))


for _function in (_wrap_model_call, _awrap_model_call, _wrap_tool_call, _awrap_tool_call):
    # traceable inspects the signature on every call; a precomputed one halves its cost.
    cast(Any, _function).__signature__ = inspect.signature(_function)


@functools.cache
def _wraps_class(with_model: bool, with_tool: bool) -> type[_ChainWrapsBase]:
    """A subclass overriding exactly the wrap families needed (create_agent checks)."""
    namespace: dict[str, Any] = {}
    if with_model:
        namespace["wrap_model_call"] = _wrap_model_call
        namespace["awrap_model_call"] = _awrap_model_call
    if with_tool:
        namespace["wrap_tool_call"] = _wrap_tool_call
        namespace["awrap_tool_call"] = _awrap_tool_call
    return type(CHAIN_NAME, (_ChainWrapsBase,), namespace)


# --- create_agent's span around the chain, only while tracing ----------------

_build_lock = threading.RLock()  # a build nested in a build is a no-op, not a deadlock


def _lazy_span(traced: Callable[..., Any], raw: Callable[..., Any]) -> Callable[..., Any]:
    """``raw`` while tracing is off, ``traced`` (create_agent's own span wrapper) while on."""

    def hook(*args: Any, **kwargs: Any) -> Any:
        return traced(*args, **kwargs) if _tracing_now() else raw(*args, **kwargs)

    functools.update_wrapper(hook, raw)
    return hook


@contextlib.contextmanager
def lazy_chain_spans() -> Iterator[None]:
    """Build agents in this block so the fused chain's hooks skip an idle span wrapper.

    Why: create_agent wraps every ``wrap_*`` hook in LangSmith's ``traceable``,
    and that wrapper sets up a run context on every call even with tracing off
    (about 20 µs: two calls a step, one per model call and one per tool call;
    a bare agent pays neither). Inside this block the chain's own hooks get a
    wrapper that checks ``tracing_is_enabled()`` per call and uses create_agent's
    span only while tracing is on, so traces are exactly as before. Every other
    ``traceable`` use (other middlewares, other threads building at the same
    time) goes to LangSmith's unchanged. Without the factory's ``traceable``
    (LangChain changed) the block is a no-op: slower, never different.
    """
    factory = importlib.import_module("langchain.agents.factory")

    def chain_aware(*args: Any, **kwargs: Any) -> Any:
        decorate = traceable(*args, **kwargs)

        def decorator(function: Callable[..., Any]) -> Any:
            traced = decorate(function)
            if not isinstance(getattr(function, "__self__", None), _ChainWrapsBase):
                return traced
            return _lazy_span(traced, function)

        return decorator

    with _build_lock:  # builds in other threads wait (a build takes milliseconds)
        original = getattr(factory, "traceable", None)
        if original is not traceable:  # LangChain changed, or a nested block: as is
            yield
            return
        setattr(factory, "traceable", chain_aware)  # noqa: B010 (a module global, on purpose)
        try:
            yield
        finally:
            setattr(factory, "traceable", original)  # noqa: B010


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
    # The async twin is "a" + a hook name; "after_model" itself also starts with "a".
    if method not in LIFECYCLE_HOOKS:

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

    def run_sync(self, hook: str, state: dict[str, Any], runtime: Any) -> Any:
        spec = self.specs[hook]
        simulation = _Simulation(spec.channels, spec.sensitive, state)
        _run_sync(spec, simulation, runtime)
        return simulation.output()

    async def run_async(self, hook: str, state: dict[str, Any], runtime: Any) -> Any:
        spec = self.specs[hook]
        simulation = _Simulation(spec.channels, spec.sensitive, state)
        await _run_async(spec, simulation, runtime)
        return simulation.output()


def _group_methods(hook: str, jumps: tuple[str, ...]) -> dict[str, Any]:
    def sync_hook(self: _FusedGroupBase, state: Any, runtime: Any) -> Any:
        return self.run_sync(hook, state, runtime)

    async def async_hook(self: _FusedGroupBase, state: Any, runtime: Any) -> Any:
        return await self.run_async(hook, state, runtime)

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


def _split_groups(run: list[_Member]) -> list[list[_Member]]:
    """Trailing undeclared hooks get their own group: only declared jumps may route."""
    if not run:
        return []
    if any(m.is_loop_exit for m in run):
        return [run]
    last_declared = max((i for i, m in enumerate(run) if m.jumps), default=-1)
    if last_declared in (-1, len(run) - 1):
        return [run]
    return [run[: last_declared + 1], run[last_declared + 1 :]]


def _group_name(names: Sequence[str]) -> str:
    """A short, readable node name: ``A``, ``A+B+C``, or ``First..Last`` for longer runs.

    The common ``Middleware`` suffix is dropped from groups, so Studio and
    ``updates`` streams show e.g. ``ThreadData..LoopDetection.before_agent``.
    """
    if len(names) == 1:
        return names[0]
    short = [n.removesuffix("Middleware") or n for n in names]
    if len(short) <= 3:
        return "+".join(short)
    return f"{short[0]}..{short[-1]}"


def fuse_middlewares(
    chain: Sequence[AgentMiddleware[Any, Any]],
    *,
    state_schema: type[Any],
    fold_after_model: bool = False,
) -> list[AgentMiddleware[Any, Any]]:
    """The fused equivalent of ``chain`` for ``create_agent(..., state_schema=state_schema)``.

    ``fold_after_model`` may only be set when the agent has a tool node (tools,
    middleware tools or a ``wrap_tool_call`` hook): without one, create_agent
    routes the model node straight to the end and ignores ``jump_to``.
    """
    chain = list(chain)
    if not chain:
        return []
    lc = _factory()
    if len({m.name for m in chain}) != len(chain):
        raise AssertionError("Please remove duplicate middleware instances.")
    schemas: tuple[Any, ...] = tuple(m.state_schema for m in chain)
    member_schema, channels, sensitive = _schemas(schemas, cast(Any, state_schema))

    fusable = {id(m): is_fusable(m) for m in chain}
    after_model = [m for m in chain if _has_hook(m, "after_model")]
    fold = fold_after_model and bool(after_model) and all(fusable[id(m)] for m in after_model)
    proxies = {
        id(m): _lifecycle_proxy(m)
        for m in chain
        if not fusable[id(m)] and any(_has_hook(m, h) for h in LIFECYCLE_HOOKS)
    }
    first_before_model = next((m for m in chain if _has_hook(m, "before_model")), None)
    first_after_model = after_model[0] if after_model else None
    first_exec_after_agent = next((m for m in reversed(chain) if _has_hook(m, "after_agent")), None)

    def member(m: AgentMiddleware[Any, Any], hook: str) -> _Member:
        return _Member(
            middleware=m,
            jumps=tuple(lc.get_can_jump_to(m, hook)),
            sync=getattr(m, hook) if _overrides(m, hook) else None,
            async_=getattr(m, f"a{hook}") if _overrides(m, f"a{hook}") else None,
            is_loop_entry=hook == "before_model" and m is first_before_model,
            is_loop_exit=hook == "after_model" and m is first_after_model,
        )

    folded = None
    if fold:
        members = tuple(member(m, "after_model") for m in reversed(after_model))
        folded = _GroupSpec("after_model", members, channels, sensitive, None)
    wraps_cls = _wraps_class(
        fold or any(_has_hook(m, "wrap_model_call") for m in chain),
        any(_has_hook(m, "wrap_tool_call") for m in chain),
    )
    wraps = wraps_cls(chain, member_schema, folded)

    # Per anchor (the proxy a group follows in registration order; None = before
    # any), the fused groups to place there: (family, member key, spec).
    buckets: dict[int | None, list[tuple[str, tuple[int, ...], _GroupSpec]]] = {}
    for hook in LIFECYCLE_HOOKS:
        if hook == "after_model" and fold:
            continue
        participants = [m for m in chain if _has_hook(m, hook)]
        units: list[tuple[str, Any]] = []  # execution order: ("proxy", m) | ("group", members)
        run: list[_Member] = []
        for m in _execution_order(hook, participants):
            if not fusable[id(m)]:
                units.extend(("group", g) for g in _split_groups(run))
                run = []
                units.append(("proxy", m))
                continue
            run.append(member(m, hook))
        units.extend(("group", g) for g in _split_groups(run))
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
            spec = _GroupSpec(hook, members, channels, sensitive, restarts_on)
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
            name = _group_name([chain[position[k]].name for k in ordered])
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
