"""The fused chain dispatches exactly as the naive composition: proven scenario by scenario.

Each scenario builds the same middlewares twice, runs the same scripted
conversation through ``create_agent(middleware=chain)`` (naive) and
``create_agent(middleware=fuse_middlewares(chain))`` (fused), and compares the
final state, the message sequence, the hook call order, jumps and interrupts.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable
from typing import Annotated, Any, NotRequired, cast

import pytest
from langchain.agents import AgentState, create_agent
from langchain.agents.middleware import AgentMiddleware, ExtendedModelResponse
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import END
from langgraph.types import Command, interrupt
from langsmith import Client
from langsmith.run_helpers import tracing_context
from langsmith.utils import get_env_var
from pydantic import BaseModel

from middlewares._fusion import (
    CHAIN_NAME,
    FusionContractError,
    FusionUnavailableError,
    _reset_factory,
    compose_chain,
    fuse_middlewares,
    is_fusable,
    lazy_chain_spans,
)
from runtime.scripted_model import ScriptedChatModel
from runtime.state import ThreadState
from tests.support.probes import LIFECYCLE, probe
from tests.support.scripted import ai_text, ai_tools, tool_call
from tests.support.tools import echo

Build = Callable[[list[str]], list[AgentMiddleware[Any, Any]]]


class CounterState(AgentState[Any]):
    counter: NotRequired[int]
    notes: NotRequired[Annotated[list[str], operator.add]]


@tool("echo")
def sync_echo(text: str) -> str:
    """Return the text unchanged (the synchronous twin of the test tool)."""
    return f"echo: {text}"


@tool
async def ask_human(question: str) -> str:
    """Ask the human and wait (interrupts the run)."""
    return f"human said: {interrupt(question)}"


def _model(script: list[Any]) -> ScriptedChatModel:
    return ScriptedChatModel.model_validate({"script": script})


def _normalize(messages: list[AnyMessage]) -> list[dict[str, Any]]:
    ids: dict[str, str] = {}

    def nid(value: str | None) -> str | None:
        return None if value is None else ids.setdefault(value, f"m{len(ids)}")

    out = []
    for m in messages:
        item: dict[str, Any] = {
            "type": m.type,
            "content": m.content,
            "name": m.name,
            "id": nid(m.id),
            "additional_kwargs": m.additional_kwargs,
        }
        if isinstance(m, AIMessage):
            item["tool_calls"] = [(c["name"], c["args"], c["id"]) for c in m.tool_calls]
            item["response_metadata"] = m.response_metadata
        if isinstance(m, ToolMessage):
            item["tool_call_id"] = m.tool_call_id
            item["status"] = m.status
        out.append(item)
    return out


def _snapshot(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        return {"result": repr(result)}
    state = {k: v for k, v in result.items() if k not in ("messages", "__interrupt__")}
    snap: dict[str, Any] = {"messages": _normalize(result.get("messages", [])), "state": state}
    if "__interrupt__" in result:
        snap["interrupts"] = [i.value for i in result["__interrupt__"]]
    return snap


async def _run(
    chain: list[AgentMiddleware[Any, Any]],
    script: list[dict[str, Any]],
    steps: list[Any],
    *,
    tools: list[Any],
    schema: type[Any],
    sync: bool,
    recursion_limit: int | None,
    response_format: Any = None,
) -> list[dict[str, Any]]:
    graph = create_agent(
        _model(script),
        tools,
        middleware=chain,
        state_schema=schema,
        checkpointer=InMemorySaver(),
        response_format=response_format,
    )
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    if recursion_limit is not None:
        config["recursion_limit"] = recursion_limit
    outcomes: list[dict[str, Any]] = []
    for step in steps:
        try:
            if sync:
                result = graph.invoke(step, config)
            else:
                result = await graph.ainvoke(step, config)
        except Exception as exc:
            outcomes.append({"error": type(exc).__name__})
            break
        snap = _snapshot(result)
        state = await graph.aget_state(config) if not sync else graph.get_state(config)
        snap["next"] = ["*" for _ in state.next]  # node names differ by design; count matters
        snap["pending_interrupts"] = [i.value for i in state.interrupts]
        outcomes.append(snap)
    return outcomes


async def compare(
    build: Build,
    script: list[dict[str, Any]],
    *,
    steps: list[Any] | None = None,
    tools: list[Any] | None = None,
    schema: type[Any] = ThreadState,
    sync: bool = False,
    recursion_limit: int | None = None,
    expect_error: bool = False,
    response_format: Any = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Run naive and fused (with and without folding); assert equal outcomes and logs."""
    steps = steps or [{"messages": [HumanMessage("go")]}]
    tools = ([sync_echo] if sync else [echo]) if tools is None else tools
    naive_log: list[str] = []
    naive = await _run(
        build(naive_log),
        script,
        steps,
        tools=tools,
        schema=schema,
        sync=sync,
        recursion_limit=recursion_limit,
        response_format=response_format,
    )
    for fold in (False, True):
        fused_log: list[str] = []
        chain = fuse_middlewares(build(fused_log), state_schema=schema, fold_after_model=fold)
        fused = await _run(
            chain,
            script,
            steps,
            tools=tools,
            schema=schema,
            sync=sync,
            recursion_limit=recursion_limit,
            response_format=response_format,
        )
        assert fused == naive, f"fold_after_model={fold}"
        assert fused_log == naive_log, f"fold_after_model={fold}"
    assert expect_error == any("error" in outcome for outcome in naive), naive
    return naive, naive_log


TWO_TOOL_STEPS = [
    ai_tools(tool_call("echo", text="one")),
    ai_tools(tool_call("echo", text="two")),
    ai_text("done"),
]


async def test_hook_order_matches_and_follows_the_documented_directions() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [probe(name, log) for name in ("A", "B", "C")]

    outcomes, log = await compare(build, TWO_TOOL_STEPS)
    assert outcomes[0]["messages"][-1]["content"] == "done"
    assert log[:3] == ["A.before_agent", "B.before_agent", "C.before_agent"]
    assert log[3:6] == ["A.before_model", "B.before_model", "C.before_model"]
    assert log[6:12] == [
        "A.wrap_model_call:in",
        "B.wrap_model_call:in",
        "C.wrap_model_call:in",
        "C.wrap_model_call:out",
        "B.wrap_model_call:out",
        "A.wrap_model_call:out",
    ]
    assert log[12:15] == ["C.after_model", "B.after_model", "A.after_model"]
    assert log[15:18] == [f"{n}.wrap_tool_call:in[call_0_0]" for n in "ABC"]
    assert log[-3:] == ["C.after_agent", "B.after_agent", "A.after_agent"]


async def test_parallel_tool_calls_keep_the_nesting_of_each_call() -> None:
    naive_log: list[str] = []
    fused_log: list[str] = []
    script = [
        ai_tools(
            tool_call("echo", text="a"), tool_call("echo", text="b"), tool_call("echo", text="c")
        ),
        ai_text("done"),
    ]
    results = []
    for log, fuse in ((naive_log, False), (fused_log, True)):
        chain = [probe(name, log) for name in ("A", "B")]
        if fuse:
            chain = fuse_middlewares(chain, state_schema=ThreadState)
        graph = create_agent(_model(script), [echo], middleware=chain)
        results.append(_snapshot(await graph.ainvoke({"messages": [HumanMessage("go")]})))
    assert results[0] == results[1]
    for position in range(3):
        call = f"[call_0_{position}]"
        expected = [
            f"A.wrap_tool_call:in{call}",
            f"B.wrap_tool_call:in{call}",
            f"B.wrap_tool_call:out{call}",
            f"A.wrap_tool_call:out{call}",
        ]
        for log in (naive_log, fused_log):
            assert [entry for entry in log if entry.endswith(call)] == expected
    assert sorted(naive_log) == sorted(fused_log)


async def test_sync_invoke_is_equivalent() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [probe(name, log) for name in ("A", "B")]

    await compare(build, TWO_TOOL_STEPS, sync=True)


async def test_mixed_sync_only_and_async_only_hooks() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [
            probe("SyncOnly", log, async_=False, wraps=()),
            probe("AsyncOnly", log, sync=False, wraps=()),
            probe("Both", log),
        ]

    await compare(build, TWO_TOOL_STEPS)


async def test_each_hook_sees_the_updates_of_the_hooks_before_it() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        def note(name: str) -> Callable[[dict[str, Any], int], Any]:
            def write(state: dict[str, Any], n: int) -> dict[str, Any]:
                log.append(
                    f"{name} sees counter={state.get('counter')} notes={state.get('notes')} "
                    f"last={state['messages'][-1].content!r} n={len(state['messages'])}"
                )
                return {
                    "counter": (state.get("counter") or 0) + 1,
                    "notes": [f"{name}{n}"],
                    "messages": [HumanMessage(f"{name} note {n}")],
                }

            return write

        return [
            probe(
                name,
                log,
                on={"before_model": note(name), "after_model": note(name)},
                state_schema=CounterState,
            )
            for name in ("A", "B", "C")
        ]

    outcomes, log = await compare(build, TWO_TOOL_STEPS, schema=CounterState)
    final = outcomes[0]
    assert final["state"]["counter"] == 18  # 3 hooks x 2 families x 3 model steps
    assert final["state"]["notes"][:3] == ["A1", "B1", "C1"]
    first_b = next(line for line in log if line.startswith("B sees"))
    assert first_b.startswith("B sees counter=1 notes=['A1'] last='A note 1'")


async def test_declared_jump_to_end_from_before_model() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        def stop_on_second(state: dict[str, Any], n: int) -> Any:
            return {"jump_to": "end"} if n == 2 else None

        return [
            probe("A", log),
            probe("B", log, jumps={"before_model": ["end"]}, on={"before_model": stop_on_second}),
            probe("C", log),
        ]

    outcomes, log = await compare(build, TWO_TOOL_STEPS)
    assert log.count("A.before_model") == 2
    assert log.count("C.before_model") == 1  # the jump skipped C and the model
    assert outcomes[0]["messages"][-1]["type"] == "tool"


async def test_after_model_jump_back_to_model_retries_once() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        def retry_empty(state: dict[str, Any], n: int) -> Any:
            last = state["messages"][-1]
            if isinstance(last, AIMessage) and not last.content and not last.tool_calls:
                return {"jump_to": "model", "messages": [HumanMessage("please answer")]}
            return None

        return [
            probe("A", log),
            probe("Retry", log, jumps={"after_model": ["model"]}, on={"after_model": retry_empty}),
            probe("C", log),
        ]

    script = [ai_tools(tool_call("echo", text="x")), ai_text(""), ai_text("final")]
    outcomes, log = await compare(build, script)
    assert outcomes[0]["messages"][-1]["content"] == "final"
    assert log.count("A.after_model") == 2  # the jump left before A on the empty turn


async def test_before_model_jump_to_model_restarts_the_group_from_its_first_hook() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        def once(state: dict[str, Any], n: int) -> Any:
            log.append(f"B sees jump_to={state.get('jump_to')}")
            return {"jump_to": "model"} if n == 1 else None

        def watch(state: dict[str, Any], n: int) -> Any:
            log.append(f"A sees jump_to={state.get('jump_to')}")
            return None

        return [
            probe("A", log, on={"before_model": watch}),
            probe("B", log, jumps={"before_model": ["model"]}, on={"before_model": once}),
            probe("C", log),
        ]

    _, log = await compare(build, [ai_text("done")])
    assert "A sees jump_to=model" in log


async def test_undeclared_jump_to_is_visible_to_the_next_hook_but_does_not_route() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        def write(state: dict[str, Any], n: int) -> Any:
            return {"jump_to": "end"}

        def watch(state: dict[str, Any], n: int) -> Any:
            log.append(f"sees jump_to={state.get('jump_to')}")
            return None

        return [
            probe("Declared", log, jumps={"before_model": ["end"]}),
            probe("Writer", log, on={"before_model": write}),
            probe("Outsider", log, fusable=False, on={"before_model": watch}),
            probe("Last", log, on={"before_model": watch}),
        ]

    outcomes, log = await compare(build, TWO_TOOL_STEPS)
    assert "sees jump_to=end" in log
    assert outcomes[0]["messages"][-1]["content"] == "done"


async def test_jump_to_an_undeclared_destination_fails_as_in_the_naive_graph() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [
            probe("A", log),
            probe(
                "B",
                log,
                jumps={"before_model": ["end"]},
                on={"before_model": lambda s, n: {"jump_to": "tools"}},
            ),
        ]

    outcomes, _ = await compare(build, TWO_TOOL_STEPS, expect_error=True)
    assert outcomes == [{"error": "KeyError"}]


async def test_loop_entry_jumping_to_itself_fails_as_in_the_naive_graph() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [
            probe(
                "First",
                log,
                jumps={"before_model": ["model"]},
                on={"before_model": lambda s, n: {"jump_to": "model"}},
            ),
            probe("B", log),
        ]

    outcomes, _ = await compare(build, TWO_TOOL_STEPS, expect_error=True)
    assert outcomes == [{"error": "KeyError"}]


async def test_endless_restart_hits_the_recursion_limit_in_both() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [
            probe("A", log, hooks=("after_agent",), wraps=()),
            probe(
                "Loop",
                log,
                hooks=("after_agent",),
                wraps=(),
                jumps={"after_agent": ["end"]},
                on={"after_agent": lambda s, n: {"jump_to": "end"}},
            ),
        ]

    naive_log: list[str] = []
    fused_log: list[str] = []
    for chain in (build(naive_log), fuse_middlewares(build(fused_log), state_schema=ThreadState)):
        graph = create_agent(_model([ai_text("hi")]), [echo], middleware=chain)
        with pytest.raises(GraphRecursionError):
            await graph.ainvoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 12})


async def test_interrupt_in_a_non_fusable_hook_pauses_and_resumes_identically() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        def approve(state: dict[str, Any], n: int) -> Any:
            last = state["messages"][-1]
            if isinstance(last, AIMessage) and last.tool_calls and len(state["messages"]) == 2:
                answer = interrupt({"question": "approve the tool call?"})
                log.append(f"approved={answer}")
            return None

        return [
            probe("A", log),
            probe("Gate", log, fusable=False, on={"after_model": approve}),
            probe("C", log),
        ]

    steps = [{"messages": [HumanMessage("go")]}, Command(resume="yes")]
    outcomes, log = await compare(build, TWO_TOOL_STEPS, steps=steps)
    assert outcomes[0]["interrupts"] == [{"question": "approve the tool call?"}]
    assert outcomes[1]["messages"][-1]["content"] == "done"
    assert "approved=yes" in log


async def test_tool_interrupt_and_command_goto_end_from_a_wrap_hook() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        def clarify(request: Any, handler: Any) -> Any:
            if request.tool_call["name"] == "echo" and request.tool_call["args"]["text"] == "ask":
                message = ToolMessage("which one?", tool_call_id=request.tool_call["id"])
                return Command(update={"messages": [message]}, goto=END)
            return handler(request)

        async def aclarify(request: Any, handler: Any) -> Any:
            if request.tool_call["name"] == "echo" and request.tool_call["args"]["text"] == "ask":
                message = ToolMessage("which one?", tool_call_id=request.tool_call["id"])
                return Command(update={"messages": [message]}, goto=END)
            return await handler(request)

        return [
            probe("A", log),
            probe(
                "Clarify",
                log,
                wrap_behaviour={"wrap_tool_call": clarify, "awrap_tool_call": aclarify},
            ),
        ]

    script = [
        ai_tools(tool_call("ask_human", question="color?")),
        ai_tools(tool_call("echo", text="ask")),
        ai_text("never"),
    ]
    steps = [{"messages": [HumanMessage("go")]}, Command(resume="blue")]
    outcomes, _ = await compare(build, script, steps=steps, tools=[echo, ask_human])
    assert outcomes[0]["interrupts"] == ["color?"]
    contents = [m["content"] for m in outcomes[1]["messages"]]
    assert "human said: blue" in contents
    assert "which one?" in contents


async def test_interrupts_raised_inside_fused_hooks_still_propagate() -> None:
    log: list[str] = []
    chain = fuse_middlewares(
        [probe("A", log), probe("Bad", log, on={"before_model": lambda s, n: interrupt("x")})],
        state_schema=ThreadState,
    )
    graph = create_agent(
        _model([ai_text("hi")]),
        [echo],
        middleware=chain,
        checkpointer=InMemorySaver(),
    )
    result = await graph.ainvoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "i"}}
    )
    assert [i.value for i in result["__interrupt__"]] == ["x"]


async def test_a_fused_hook_returning_command_goto_is_a_contract_error() -> None:
    log: list[str] = []
    chain = fuse_middlewares(
        [probe("A", log, on={"before_model": lambda s, n: Command(goto="tools")})],
        state_schema=ThreadState,
    )
    graph = create_agent(_model([ai_text("hi")]), [echo], middleware=chain)
    with pytest.raises(FusionContractError, match="deerflow_fusable"):
        await graph.ainvoke({"messages": [HumanMessage("go")]})


def _command_writer(name: str) -> Callable[[dict[str, Any], int], Any]:
    def write(state: dict[str, Any], n: int) -> Any:
        return Command(update={"notes": [name], "messages": [HumanMessage(f"{name}{n}")]})

    return write


async def test_command_updates_and_repeated_reducer_writes_are_applied_in_order() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [
            probe(
                name,
                log,
                state_schema=CounterState,
                on={"before_model": _command_writer(name)},
            )
            for name in ("A", "B", "C")
        ]

    outcomes, _ = await compare(build, TWO_TOOL_STEPS, schema=CounterState)
    assert outcomes[0]["state"]["notes"][:3] == ["A", "B", "C"]


async def test_tools_schema_and_node_count() -> None:
    log: list[str] = []
    chain = [
        probe("A", log, tools=[echo]),
        probe("B", log, fusable=False),
        probe("C", log, state_schema=CounterState),
        probe("D", log),
    ]
    naive = create_agent(_model([]), [], middleware=chain)
    fused = create_agent(
        _model([]),
        [],
        middleware=fuse_middlewares(chain, state_schema=ThreadState),
    )
    assert list(cast(Any, fused.nodes["tools"].bound).tools_by_name) == ["echo"]
    assert set(fused.get_input_jsonschema()["properties"]) == set(
        naive.get_input_jsonschema()["properties"]
    )
    hook_nodes = [n for n in fused.nodes if "." in n]
    # before_agent: [A] B [C+D]; the same shape for each family (reversed for after_*).
    assert len(hook_nodes) == 12
    assert "B.before_model" in fused.nodes
    assert "A.before_model" in fused.nodes and "C+D.before_model" in fused.nodes
    assert len([n for n in naive.nodes if "." in n]) == 16


def test_fusability_rules() -> None:
    log: list[str] = []
    assert is_fusable(probe("X", log, fusable=True))
    assert not is_fusable(probe("Y", log, fusable=False))
    assert not is_fusable(probe("Z", log, fusable=None))
    # Living under ``middlewares.`` no longer makes a class fusable: only the attribute.
    undeclared = type("Undeclared", (AgentMiddleware,), {"__module__": "middlewares.undeclared"})
    assert not is_fusable(undeclared())
    truthy = type("Truthy", (AgentMiddleware,), {"deerflow_fusable": 1})
    assert not is_fusable(truthy())


def test_every_built_in_middleware_opts_in_explicitly() -> None:
    import importlib
    import pkgutil

    import middlewares

    found = []
    for info in pkgutil.iter_modules(middlewares.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"middlewares.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, AgentMiddleware)
                and value.__module__ == module.__name__
            ):
                found.append(value)
                assert isinstance(value.__dict__.get("deerflow_fusable"), bool), value
    assert len(found) >= 20


# --- structured output ------------------------------------------------------


class Verdict(BaseModel):
    """The structured answer."""

    verdict: str


TWO_TURNS = [{"messages": [HumanMessage("first")]}, {"messages": [HumanMessage("second")]}]


async def test_structured_output_is_reset_on_a_later_turn_as_in_the_naive_graph() -> None:
    """With ``response_format``, a turn without a structured answer clears the previous
    turn's ``structured_response`` (create_agent's model node); the folded model node
    once kept the stale value."""

    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        def saw(state: dict[str, Any], _: int) -> None:
            log.append(f"after_model saw {state.get('structured_response')!r}")

        return [probe("A", log), probe("B", log, on={"after_model": saw})]

    script = [
        ai_tools(tool_call("Verdict", verdict="yes")),
        ai_text("no structured answer this time"),
    ]
    naive, log = await compare(
        build, script, steps=TWO_TURNS, response_format=ToolStrategy(Verdict)
    )
    assert naive[0]["state"]["structured_response"] == Verdict(verdict="yes")
    assert naive[1]["state"].get("structured_response") is None
    # What the after_model hooks see on the second turn: already reset.
    assert [e for e in log if e.startswith("after_model saw")][-1] == "after_model saw None"


async def test_structured_output_after_tools_with_a_non_fusable_member() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [probe("A", log), probe("B", log, fusable=False), probe("C", log)]

    script = [
        ai_tools(tool_call("echo", text="one")),
        ai_tools(tool_call("Verdict", verdict="done")),
        ai_tools(tool_call("Verdict", verdict="again")),
    ]
    naive, _ = await compare(build, script, steps=TWO_TURNS, response_format=ToolStrategy(Verdict))
    assert naive[1]["state"]["structured_response"] == Verdict(verdict="again")


# --- falling back when langchain's internals move ---------------------------


@pytest.fixture
def fresh_factory() -> Any:
    _reset_factory()
    yield
    _reset_factory()


@pytest.mark.parametrize("missing", ["_build_commands", "_get_can_jump_to"])
def test_a_removed_private_name_falls_back_to_the_naive_chain_with_one_warning(
    missing: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_factory: None,
) -> None:
    import langchain.agents.factory as factory

    monkeypatch.delattr(factory, missing)
    log: list[str] = []
    chain = [probe("A", log), probe("B", log)]
    with caplog.at_level("WARNING", logger="middlewares._fusion"):
        assert compose_chain(chain, state_schema=ThreadState, tools=[echo]) == chain
        assert compose_chain(chain, state_schema=ThreadState, tools=[echo]) == chain
    warnings = [r for r in caplog.records if "fusion is off" in r.getMessage()]
    assert len(warnings) == 1 and missing in warnings[0].getMessage()
    # Built directly, fusion says why instead of failing on a NameError.
    with pytest.raises(FusionUnavailableError, match=missing):
        fuse_middlewares(chain, state_schema=ThreadState)


def test_an_untested_langchain_version_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_factory: None
) -> None:
    import middlewares._fusion as fusion

    monkeypatch.setattr(fusion, "TESTED_LANGCHAIN", ("0.9",))
    log: list[str] = []
    chain = [probe("A", log)]
    with caplog.at_level("WARNING", logger="middlewares._fusion"):
        assert compose_chain(chain, state_schema=ThreadState) == chain
    assert "not a version the fused chain was tested with" in caplog.text


def test_a_changed_build_commands_signature_falls_back(
    monkeypatch: pytest.MonkeyPatch, fresh_factory: None
) -> None:
    import langchain.agents.factory as factory

    def drifted(model_response: Any, middleware_commands: Any = None, *, new_flag: bool) -> Any:
        raise AssertionError("never called")

    monkeypatch.setattr(factory, "_build_commands", drifted)
    log: list[str] = []
    chain = [probe("A", log)]
    assert compose_chain(chain, state_schema=ThreadState) == chain


async def test_the_lead_chain_builds_and_runs_naive_when_a_private_name_is_gone(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_factory: None,
    tmp_path: Any,
) -> None:
    """The whole assembled chain, composed as ``build_agent`` composes it, runs a turn."""
    import middlewares._fusion as fusion
    from middlewares.chain import build_middlewares
    from tests.support.chain_fixtures import inputs_for

    # A name langchain renamed (deleting a real one would break langchain itself).
    names = (*fusion._FACTORY_NAMES, "_a_helper_langchain_renamed")
    monkeypatch.setattr(fusion, "_FACTORY_NAMES", names)
    inputs = await asyncio.to_thread(inputs_for, tmp_path, configurable={"thread_id": "t"})
    chain = build_middlewares(inputs)
    with caplog.at_level("WARNING", logger="middlewares._fusion"):
        composed = compose_chain(chain, state_schema=ThreadState, tools=[echo])
    assert composed == chain
    graph = create_agent(
        _model(TWO_TOOL_STEPS),
        [echo],
        middleware=composed,
        state_schema=ThreadState,
        checkpointer=InMemorySaver(),
    )
    result = await graph.ainvoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}}
    )
    assert result["messages"][-1].content == "done"
    assert len([r for r in caplog.records if "fusion is off" in r.getMessage()]) == 1


# --- node names -------------------------------------------------------------


def test_fused_node_names_stay_short_and_readable(tmp_path: Any) -> None:
    from middlewares.chain import build_middlewares
    from tests.support.chain_fixtures import inputs_for

    inputs = inputs_for(tmp_path, configurable={"thread_id": "t", "is_plan_mode": True})
    fused = fuse_middlewares(build_middlewares(inputs), state_schema=ThreadState)
    graph = create_agent(_model([]), [echo], middleware=fused, state_schema=ThreadState)
    hook_nodes = [n for n in graph.nodes if "." in n]
    assert hook_nodes
    for node in hook_nodes:
        group, _, hook = node.rpartition(".")
        assert hook in LIFECYCLE and len(node) <= 64, node
        assert group.count("+") <= 2, node
    log: list[str] = []
    long_run = [probe(f"{c}Middleware", log) for c in "PQRST"]
    names = {m.name for m in fuse_middlewares(long_run, state_schema=ThreadState)}
    assert "P..T" in names
    names = {m.name for m in fuse_middlewares(long_run[:2], state_schema=ThreadState)}
    assert "P+Q" in names


def test_compose_chain_keeps_the_naive_chain_when_tracing_or_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []
    chain = [probe("A", log), probe("B", log)]
    fused = compose_chain(chain, state_schema=ThreadState)
    assert next(m.name for m in fused) == CHAIN_NAME
    try:
        monkeypatch.setenv("LANGSMITH_TRACING", "true")
        cast(Any, get_env_var).cache_clear()
        assert compose_chain(chain, state_schema=ThreadState) == chain
    finally:
        monkeypatch.setenv("LANGSMITH_TRACING", "false")
        cast(Any, get_env_var).cache_clear()
    monkeypatch.setenv("DEERFLOW_CHAIN_FUSION", "false")
    assert compose_chain(chain, state_schema=ThreadState) == chain


def test_duplicate_names_are_rejected_like_create_agent() -> None:
    log: list[str] = []
    with pytest.raises(AssertionError, match="duplicate"):
        fuse_middlewares([probe("A", log), probe("A", log)], state_schema=ThreadState)


async def test_folded_after_model_sees_wrap_commands_and_repaired_history() -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        async def command_wrap(request: Any, handler: Any) -> Any:
            response = await handler(request)
            update = {"counter": 100, "notes": ["wrap"]}
            return ExtendedModelResponse(model_response=response, command=Command(update=update))

        def sync_command_wrap(request: Any, handler: Any) -> Any:
            response = handler(request)
            update = {"counter": 100, "notes": ["wrap"]}
            return ExtendedModelResponse(model_response=response, command=Command(update=update))

        def after(state: dict[str, Any], n: int) -> Any:
            log.append(f"after sees counter={state.get('counter')} n={len(state['messages'])}")
            return {"counter": (state.get("counter") or 0) + 1, "notes": [f"after{n}"]}

        return [
            probe("A", log, state_schema=CounterState, on={"after_model": after}),
            probe(
                "Wrapper",
                log,
                state_schema=CounterState,
                wrap_behaviour={
                    "wrap_model_call": sync_command_wrap,
                    "awrap_model_call": command_wrap,
                },
            ),
        ]

    broken = AIMessage(
        "", invalid_tool_calls=[{"name": "echo", "args": "{oops", "id": "bad_1", "error": "json"}]
    )
    steps = [{"messages": [HumanMessage("first"), broken, HumanMessage("go on")]}]
    for sync in (False, True):
        outcomes, log = await compare(
            build,
            [ai_text("ignored"), *TWO_TOOL_STEPS],
            steps=steps,
            schema=CounterState,
            sync=sync,
        )
        assert any(
            m["content"].startswith("Tool call echo with id bad_1") for m in outcomes[0]["messages"]
        )
        assert any(line.startswith("after sees counter=100") for line in log)


def test_folding_removes_the_after_model_nodes() -> None:
    log: list[str] = []
    chain = [probe("A", log), probe("B", log)]
    folded = create_agent(
        _model([]),
        [echo],
        middleware=fuse_middlewares(chain, state_schema=ThreadState, fold_after_model=True),
    )
    assert not [n for n in folded.nodes if n.endswith(".after_model")]
    assert "A+B.before_model" in folded.nodes
    gated = [probe("C", log), probe("D", log, fusable=False)]
    kept = fuse_middlewares(gated, state_schema=ThreadState, fold_after_model=True)
    graph = create_agent(_model([]), [echo], middleware=kept)
    assert {"C.after_model", "D.after_model"} <= set(graph.nodes)  # a non-fusable one stays a node


@pytest.mark.parametrize("hook", LIFECYCLE)
async def test_single_family_chains(hook: str) -> None:
    def build(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
        return [probe(name, log, hooks=(hook,), wraps=()) for name in ("A", "B")]

    await compare(build, TWO_TOOL_STEPS)


class CaptureClient(Client):
    """A LangSmith client that keeps runs in memory (no network)."""

    def __init__(self) -> None:
        super().__init__(api_key="test", api_url="http://127.0.0.1:9", auto_batch_tracing=False)
        self.captured: dict[str, dict[str, str]] = {}

    def create_run(self, name: str, inputs: Any, run_type: str, *args: Any, **kwargs: Any) -> None:
        self.captured[str(kwargs.get("id"))] = {
            "name": name,
            "parent": str(kwargs.get("parent_run_id")),
        }

    def update_run(self, run_id: Any, **kwargs: Any) -> None:
        return None

    def paths(self) -> list[str]:
        def path(run_id: str) -> str:
            names = []
            while run_id in self.captured:
                names.append(self.captured[run_id]["name"])
                run_id = self.captured[run_id]["parent"]
            return "/".join(reversed(names))

        return [path(run_id) for run_id in self.captured]


async def test_with_tracing_on_the_agent_is_built_naive_and_every_hook_is_traced(
    tmp_path: Any,
) -> None:
    from graphs._build import build_agent
    from runtime.config import get_settings

    log: list[str] = []
    client = CaptureClient()
    with tracing_context(enabled=True, client=client, project_name="test"):
        graph = build_agent(
            get_settings(),
            {},
            kind="lead_agent",
            system_prompt="test",
            tools=[echo],
            custom_middlewares=[probe("A", log), probe("B", log)],
        )
        assert "A.after_model" in graph.nodes and CHAIN_NAME not in str(list(graph.nodes))
        await graph.ainvoke({"messages": [HumanMessage("go")]})
    paths = client.paths()
    assert any(
        "/A.awrap_model_call/B.awrap_model_call/" in p and p.endswith("/ScriptedChatModel")
        for p in paths
    )
    assert any(p.endswith("/A.after_model") for p in paths)


async def test_tracing_turned_on_after_a_fused_build_still_traces_each_member() -> None:
    log: list[str] = []
    chain = fuse_middlewares(
        [probe("A", log), probe("B", log)], state_schema=ThreadState, fold_after_model=True
    )
    graph = create_agent(_model(TWO_TOOL_STEPS), [echo], middleware=chain)
    client = CaptureClient()
    with tracing_context(enabled=True, client=client, project_name="test"):
        await graph.ainvoke({"messages": [HumanMessage("go")]})
    paths = client.paths()
    for expected in (
        "model/A.awrap_model_call/B.awrap_model_call/ScriptedChatModel",
        "tools/A.awrap_tool_call/B.awrap_tool_call",
        "A+B.before_model/B.before_model",
        "model/B.after_model",
    ):
        assert any(p.endswith(expected) for p in paths), expected


class _Plain(AgentMiddleware[Any, Any]):
    """A wrap middleware passed to create_agent as is (not part of a fused chain)."""

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


async def test_built_with_lazy_spans_the_chain_sets_up_no_langsmith_run_while_tracing_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The idle span wrapper create_agent puts around the chain's hooks is skipped."""
    import langchain.agents.factory as factory
    from langsmith import run_helpers

    setups: list[Any] = []
    real_setup = run_helpers._setup_run

    def counting(func: Any, *args: Any, **kwargs: Any) -> Any:
        setups.append(getattr(func, "__name__", func))
        return real_setup(func, *args, **kwargs)

    monkeypatch.setattr(run_helpers, "_setup_run", counting)
    original = factory.traceable
    log: list[str] = []
    chain = fuse_middlewares(
        [probe("A", log), probe("B", log)], state_schema=ThreadState, fold_after_model=True
    )
    with lazy_chain_spans(), lazy_chain_spans():  # nested: the inner block changes nothing
        lazy = create_agent(_model(TWO_TOOL_STEPS), [echo], middleware=chain)
    assert factory.traceable is original  # restored after the build
    await lazy.ainvoke({"messages": [HumanMessage("go")]})
    assert setups == []
    # Built outside the block (or a middleware that is not the chain): the wrapper runs.
    plain = create_agent(_model(TWO_TOOL_STEPS), [echo], middleware=[_Plain()])
    await plain.ainvoke({"messages": [HumanMessage("go")]})
    assert setups  # LangSmith set up a run per wrap call, as create_agent always did
    setups.clear()
    with lazy_chain_spans():
        other = create_agent(_model(TWO_TOOL_STEPS), [echo], middleware=[_Plain()])
    await other.ainvoke({"messages": [HumanMessage("go")]})
    assert setups


async def test_built_with_lazy_spans_tracing_turned_on_later_still_traces_each_member() -> None:
    log: list[str] = []
    chain = fuse_middlewares(
        [probe("A", log), probe("B", log)], state_schema=ThreadState, fold_after_model=True
    )
    with lazy_chain_spans():
        graph = create_agent(_model(TWO_TOOL_STEPS), [echo], middleware=chain)
    client = CaptureClient()
    with tracing_context(enabled=True, client=client, project_name="test"):
        await graph.ainvoke({"messages": [HumanMessage("go")]})
    paths = client.paths()
    assert any(p.endswith(f"model/{CHAIN_NAME}.awrap_model_call") for p in paths), paths
    for expected in (
        "model/A.awrap_model_call/B.awrap_model_call/ScriptedChatModel",
        "tools/A.awrap_tool_call/B.awrap_tool_call",
        "model/B.after_model",
    ):
        assert any(p.endswith(expected) for p in paths), expected


def _light(messages: list[AnyMessage]) -> list[tuple[Any, ...]]:
    """Type, text and tool calls: what a real chain must keep identical run to run."""
    return [
        (m.type, m.text, [(c["name"], c["args"]) for c in getattr(m, "tool_calls", [])])
        for m in messages
    ]


@pytest.mark.parametrize("probes", [True, False], ids=["every-slot-probed", "real-factories"])
async def test_the_assembled_lead_chain_runs_the_same_fused(
    probes: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The spec-shaped chain (or whatever the real factories assemble) naive vs fused."""
    from deerflow_extension_api._plugins import load_extensions
    from middlewares import chain as chain_module
    from middlewares.chain import build_middlewares
    from tests.support.chain_fixtures import inputs_for, probe_factories

    log: list[str] = []
    if probes:
        monkeypatch.setattr(chain_module, "FACTORIES", probe_factories(log))
    # Reading the config and loading the plugin are blocking: off the event loop.
    inputs = await asyncio.to_thread(
        inputs_for,
        tmp_path,
        configurable={"thread_id": "t", "is_plan_mode": True},
        extensions={"middlewares": ["tests.support.demo_extension:ConfiguredAudit"]},
        plugins=[
            {
                "module": "tests.support.demo_extension",
                "config": {
                    "contributions": [
                        {"kind": "ToolObserver", "placement": "TOOL_VISIBLE"},
                        {"kind": "StateObserver", "placement": "STANDARD"},
                    ]
                },
            }
        ],
    )
    await asyncio.to_thread(load_extensions, inputs.settings)
    results = []
    logs = []
    for fuse in (False, True):
        log.clear()
        middleware = build_middlewares(inputs)
        if fuse:
            middleware = fuse_middlewares(
                middleware, state_schema=ThreadState, fold_after_model=True
            )
        graph = create_agent(
            _model(TWO_TOOL_STEPS),
            [echo],
            middleware=middleware,
            state_schema=ThreadState,
            checkpointer=InMemorySaver(),
        )
        config: RunnableConfig = {"configurable": {"thread_id": "t"}}
        result = await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
        results.append(_light(result["messages"]))
        logs.append(list(log))
    assert results[0] == results[1]
    assert logs[0] == logs[1]
    assert results[0][-1][1] == "done"


def test_a_non_fusable_after_hook_runs_its_sync_twin_in_a_sync_invoke() -> None:
    """Regression: "after_model" starts with "a"; the proxy once took it for the async twin."""
    log: list[str] = []
    chain = [probe("A", log), probe("D", log, fusable=False)]
    graph = create_agent(
        _model([ai_text("done")]),
        [echo],
        middleware=fuse_middlewares(chain, state_schema=ThreadState, fold_after_model=True),
        checkpointer=InMemorySaver(),
    )
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "sync"}})
    assert any(line.startswith("D.after_model") for line in log), log
