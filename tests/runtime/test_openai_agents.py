"""OpenAI Agents SDK agents under ``hx.Runtime``, as they are, on the real wire (both databases).

The SDK's own ``OpenAIChatCompletionsModel`` and ``OpenAIResponsesModel`` with an ``openai.AsyncOpenAI``
pointed at the loopback provider (``tests/support/provider_server.py``), which logs every request as
it arrives: what the model was offered and told is read from the requests themselves. The agents are
``agents.Agent`` objects with ``@function_tool`` tools, static and dynamic instructions and an
``output_type``, handed to the runtime as they are.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import pydantic
import pytest
import sqlalchemy as sa
from agents import (
    Agent,
    AgentOutputSchema,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunContextWrapper,
    function_tool,
)
from openai import AsyncOpenAI

import helix_dbos as hx
from helix_dbos.errors import ConfigurationError, UnsupportedFeatureError
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from tests.support.provider_server import Calls, ProviderServer, Status, Text, provider_server, tools_sent

SDK_WIRES = ("chat", "responses")


def sdk_model(wire: str, server: ProviderServer, name: str = "gpt-4o") -> Any:
    """The SDK's own model class for ``wire``, its client pointed at the loopback provider."""
    client = AsyncOpenAI(api_key="test-key", base_url=server.url)
    return OpenAIChatCompletionsModel(name, openai_client=client) if wire == "chat" else OpenAIResponsesModel(name, openai_client=client)


class Forecast(pydantic.BaseModel):
    city: str
    celsius: float


EFFECTS: list[tuple[str, Any]] = []


@hx.openai_policy(replay="safe")
@function_tool
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    EFFECTS.append(("lookup", city))
    return f"sunny in {city}"


@function_tool
async def book(ctx: RunContextWrapper[Any], city: str) -> dict[str, Any]:
    """Book a trip to a city (an effect: unsafe by default)."""
    EFFECTS.append(("book", (city, hx.openai_dispatch_id(ctx), ctx.context)))
    return {"booked": city, "dispatch_id": hx.openai_dispatch_id(ctx)}


@function_tool
def broken(city: str) -> str:
    """A tool whose body fails."""
    raise RuntimeError(f"no route to {city}")


@dataclass
class Who:
    user: str


def who(ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
    return f"You work for {ctx.context.user}."


def _agent(wire: str, server: ProviderServer, name: str, **kw: Any) -> Agent[Any]:
    return Agent(name=f"{name}_{wire}", model=sdk_model(wire, server), tools=[lookup, book, broken], **kw)


def _sent(entry: Any) -> list[Any]:
    """The messages/items a request carried, in its wire's words."""
    return entry.body.get("messages") if entry.wire == "chat" else entry.body.get("input")


def _instructions(entry: Any) -> str | None:
    if entry.wire == "chat":
        first = entry.body["messages"][0]
        return first["content"] if first["role"] == "system" else None
    return entry.body.get("instructions")


def _tool_outputs(entry: Any) -> dict[str, str]:
    """What the model was told each call returned, by call id."""
    if entry.wire == "chat":
        return {m["tool_call_id"]: m["content"] for m in entry.body["messages"] if m.get("role") == "tool"}
    return {i["call_id"]: i["output"] for i in entry.body["input"] if i.get("type") == "function_call_output"}


def test_a_plain_agent_runs_to_its_structured_output_on_both_wires(make_runtime: Any, db_url: str) -> None:
    """Tools called, an error told to the model as an error (not the SDK's "please try again"), the
    output validated by the SDK's AgentOutputSchema, dynamic instructions rendered with the run's
    context, usage recorded per request as the provider reported it."""
    with provider_server() as server:
        agents = [_agent(w, server, "trip", instructions=who, output_type=Forecast) for w in SDK_WIRES]
        rt = make_runtime(agents, deps_factories={a.name: (lambda data: Who(**data)) for a in agents})
        for wire in SDK_WIRES:
            EFFECTS.clear()
            before = len(server.requests())
            server.script(
                Calls([("lookup", {"city": "Oslo"}), ("book", {"city": "Oslo"}), ("broken", {"city": "Oslo"})], usage=(100, 20)),
                Calls([("final_result", {"city": "Oslo", "celsius": 21.5})], usage=(150, 10)),
            )
            result = rt.start(f"trip_{wire}", "weather and a trip to Oslo?", deps={"user": "ann"}).result(timeout=120)
            assert result.status == "completed", (wire, result)
            assert result.output == {"city": "Oslo", "celsius": 21.5}
            requests = server.requests()[before:]
            assert [r.wire for r in requests] == [wire, wire]
            offered = tools_sent(requests[0])
            assert set(offered) == {"lookup", "book", "broken", "final_result"}, offered
            assert offered["final_result"]["parameters"]["properties"].keys() == {"city", "celsius"}
            assert _instructions(requests[0]) == "You work for ann."
            told = _tool_outputs(requests[1])
            assert len(told) == 3
            outputs = list(told.values())
            assert outputs[0] == "sunny in Oslo"
            booked = json.loads(outputs[1])
            assert booked["booked"] == "Oslo" and booked["dispatch_id"]
            error = json.loads(outputs[2])
            assert error["status"] == "error" and "no route to Oslo" in json.dumps(error), error
            assert "Please try again" not in outputs[2]
            assert sorted(EFFECTS, key=lambda e: e[0]) == [("book", ("Oslo", booked["dispatch_id"], Who("ann"))), ("lookup", "Oslo")]  # bodies run concurrently
            calls = {c.tool_name: c for c in rt.session(result.session_id).calls}
            assert (calls["lookup"].replay, calls["book"].replay, calls["broken"].status) == ("safe", "unsafe", "error")
            assert calls["book"].dispatch_id == booked["dispatch_id"]
            engine = create_sync_engine(db_url)
            try:
                with engine.connect() as conn:
                    rows = conn.execute(sa.select(t.usage.c.step, t.usage.c.input_tokens, t.usage.c.output_tokens, t.usage.c.model_name)
                                        .where(t.usage.c.run_id == result.run_id).order_by(t.usage.c.step)).all()
            finally:
                engine.dispose()
            assert [tuple(r[:3]) for r in rows] == [(0, 100, 20), (1, 150, 10)], rows
            assert {r[3] for r in rows} == {"gpt-4o"}


def test_a_text_agent_with_static_instructions(make_runtime: Any) -> None:
    with provider_server() as server:
        agents = [_agent(w, server, "plain", instructions="Be brief.") for w in SDK_WIRES]
        rt = make_runtime(agents)
        for wire in SDK_WIRES:
            before = len(server.requests())
            server.script(Text("hello there"))
            result = rt.start(f"plain_{wire}", "hi").result(timeout=120)
            assert (result.status, result.output) == ("completed", "hello there"), result
            (request,) = server.requests()[before:]
            assert _instructions(request) == "Be brief."
            assert any("hi" in json.dumps(m) for m in _sent(request))


def test_a_provider_error_is_asked_again_then_typed(make_runtime: Any) -> None:
    """The SDK's client retries are off: the step's budget makes the requests, and a 400 fails the
    run typed ``model_request_invalid`` (the provider error mapped as for pydantic-ai's models)."""
    with provider_server() as server:
        agents = [hx.from_openai_agents(_agent(w, server, "flaky"), model_retries=hx.ModelRetries(attempts=3, first_delay=0.1, jitter=0.0))
                  for w in SDK_WIRES]
        rt = make_runtime(agents)
        for wire in SDK_WIRES:
            before = len(server.requests())
            server.script(Status(500), Text("recovered"))
            result = rt.start(f"flaky_{wire}", "hi").result(timeout=120)
            assert (result.status, result.output) == ("completed", "recovered"), result
            assert len(server.requests()[before:]) == 2
            before = len(server.requests())
            server.script(Status(400))
            result = rt.start(f"flaky_{wire}", "hi").result(timeout=120)
            assert (result.status, result.error_code) == ("failed", "model_request_invalid"), result
            assert len(server.requests()[before:]) == 1


def test_what_the_adapter_cannot_honour_is_refused_when_the_agent_is_read() -> None:
    from agents import WebSearchTool

    model = OpenAIChatCompletionsModel("m", openai_client=AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"))
    refused: list[tuple[Agent[Any], str]] = [
        (Agent(name="a", model=model, tools=[WebSearchTool()]), "WebSearchTool"),
        (Agent(name="a", model=model, tool_use_behavior="stop_on_first_tool"), "tool_use_behavior"),
        (Agent(name="a", model=model, tools=[function_tool(lambda x: x, name_override="g", needs_approval=False, tool_input_guardrails=[])]), ""),
    ]
    for agent, what in refused[:-1]:
        with pytest.raises(UnsupportedFeatureError, match=what):
            hx.from_openai_agents(agent)
    with pytest.raises(ConfigurationError, match="has no model"):
        hx.from_openai_agents(Agent(name="a"))
    with pytest.raises(ConfigurationError, match="replay must be"):
        hx.openai_policy(lookup, replay="maybe")
    with pytest.raises(ConfigurationError, match="tools it does not have"):
        hx.from_openai_agents(Agent(name="a", model=model, tools=[lookup]), tool_policies={"nope": {"replay": "safe"}})


class Colour(pydantic.BaseModel):
    question: str


def test_client_tools_are_offered_beside_the_sdks_tools_and_checked_when_read() -> None:
    """``from_openai_agents(client_tools=...)``: the SDK has no client tool, so an ``hx.client_tool``
    is offered beside the agent's function tools (the run suspends on it; tests/processes/
    test_client_tools.py runs it for both SDKs); anything else, or a name taken, is refused."""
    model = OpenAIChatCompletionsModel("m", openai_client=AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"))
    ask = hx.client_tool(name="ask", description="Ask the user.", input_schema=Colour)
    read = hx.from_openai_agents(Agent(name="a", model=model, tools=[lookup]), client_tools=[ask])
    assert [(t.name, t.kind) for t in read.tools] == [("lookup", "tool"), ("ask", "client")]
    from helix_dbos.definitions.context import RunScope

    tools, _ = asyncio.run(read._offered(read._members()[0], RunScope("s", "r")))
    offered = {t.name: t for t in tools}
    assert set(offered) == {"lookup", "ask"} and offered["ask"].params_json_schema == ask.definition().parameters_json_schema

    @hx.tool
    def plain(x: int) -> int:
        return x

    with pytest.raises(ConfigurationError, match="client_tools takes"):
        hx.from_openai_agents(Agent(name="a", model=model, tools=[lookup]), client_tools=[plain])
    taken = hx.client_tool(name="lookup", description="d", input_schema=Colour)
    with pytest.raises(ConfigurationError, match="duplicate tool names"):
        hx.from_openai_agents(Agent(name="a", model=model, tools=[lookup]), client_tools=[taken])


def test_policies_from_the_tool_the_sdk_and_the_mapping() -> None:
    model = OpenAIChatCompletionsModel("m", openai_client=AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"))

    @function_tool(needs_approval=True)
    def wire_money(amount: int) -> str:
        """Send money."""
        return "sent"

    @hx.openai_policy(concurrency_group="bank", sequential=True)
    @function_tool
    def audit(note: str) -> str:
        """Write an audit note."""
        return note

    agent = hx.from_openai_agents(Agent(name="pol", model=model, tools=[lookup, book, wire_money, audit]),
                                  tool_policies={"book": {"replay": "safe"}})
    tools = {x.name: x for x in agent.tools}
    assert (tools["lookup"].replay, tools["book"].replay, tools["wire_money"].replay) == ("safe", "safe", "unsafe")
    assert tools["wire_money"].requires_approval is True
    assert (tools["audit"].concurrency_group, tools["audit"].sequential) == ("bank", True)
    assert [tools[n].policy_source for n in ("lookup", "book", "wire_money", "audit")] == ["declared", "mapping", "needs_approval", "declared"]  # type: ignore[attr-defined]
    with pytest.raises(pydantic.ValidationError):
        tools["wire_money"].validate({"amount": "lots"})
    assert tools["wire_money"].validate('{"amount": 3}').model_dump() == {"amount": 3}


def test_output_schema_is_the_sdks() -> None:
    model = OpenAIChatCompletionsModel("m", openai_client=AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"))
    agent = hx.from_openai_agents(Agent(name="out", model=model, output_type=AgentOutputSchema(list[int], strict_json_schema=False)))
    definition = agent.output_definition()
    assert definition is not None and definition.parameters_json_schema["properties"].keys() == {"response"}
    assert agent.validate_output({"response": [1, 2]}) == [1, 2]
    with pytest.raises(pydantic.ValidationError):
        agent.validate_output({"response": "x"})


APPROVED: list[str] = []


@function_tool(needs_approval=True)
def wire_money(amount: int) -> str:
    """Send money (always asks a human first)."""
    APPROVED.append(f"wire:{amount}")
    return "sent"


async def _risky(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
    return bool(params["table"] != "tmp")


@function_tool(needs_approval=_risky)
def purge(table: str) -> str:
    """Purge a table (asks a human unless it is the scratch table)."""
    APPROVED.append(f"purge:{table}")
    return "purged"


def test_needs_approval_is_the_runtimes_gate(make_runtime: Any) -> None:
    """``needs_approval=True`` suspends the call for ``approve``; a ``needs_approval`` function is asked
    per call when the reply is planned: a call it gates suspends, one it lets pass runs at once; an
    approved call runs once, a denied one never."""
    with provider_server() as server:
        agents = [Agent(name=f"dba_{w}", model=sdk_model(w, server), tools=[wire_money, purge]) for w in SDK_WIRES]
        rt = make_runtime(agents)
        for wire in SDK_WIRES:
            APPROVED.clear()
            server.script(Calls([("wire_money", {"amount": 5}), ("purge", {"table": "users"}), ("purge", {"table": "tmp"})]), Text("done"))
            result = rt.start(f"dba_{wire}", "clean up").result(timeout=120)
            assert result.status.startswith("suspended"), result
            pending = {(p.tool_name, p.args.get("table")): p for p in result.pending}
            assert sorted(pending) == [("purge", "users"), ("wire_money", None)] and {p.kind for p in pending.values()} == {"approval"}
            assert APPROVED == ["purge:tmp"]
            rt.approve(result.session_id, pending[("wire_money", None)].dispatch_id)
            receipt = rt.approve(result.session_id, pending[("purge", "users")].dispatch_id, approved=False, reason="keep users")
            assert receipt.run is not None
            final = receipt.run.result(timeout=120)
            assert (final.status, final.output) == ("completed", "done"), final
            assert sorted(APPROVED) == ["purge:tmp", "wire:5"]
            statuses = sorted((c.tool_name, c.status) for c in rt.session(result.session_id).calls)
            assert statuses == [("purge", "denied"), ("purge", "ok"), ("wire_money", "ok")]


SLOW = threading.Event()
SLOW_BODIES: list[str] = []


@hx.openai_policy(replay="safe")
@function_tool
async def slow_read(key: str) -> str:
    """A slow read."""
    SLOW_BODIES.append(key)
    while not SLOW.is_set():
        await asyncio.sleep(0.05)
    return f"read {key}"


def test_a_stop_mid_body_ends_the_run_before_the_model_is_asked_again(make_runtime: Any) -> None:
    """``stop`` (interrupt) while a body runs: the body's answer is recorded, the run ends
    ``interrupted`` without a second model request, and the session takes its next turn."""
    SLOW.clear()
    SLOW_BODIES.clear()
    with provider_server() as server:
        rt = make_runtime([Agent(name="stopped", model=sdk_model("responses", server), tools=[slow_read])])
        server.script(Calls([("slow_read", {"key": "k1"})]))
        handle = rt.start("stopped", "read k1")
        deadline = time.monotonic() + 120
        while not SLOW_BODIES:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        rt.stop(handle.session_id, kind="interrupt")
        SLOW.set()
        result = handle.result(timeout=120)
        assert result.status == "interrupted", result
        assert len(server.requests()) == 1 and SLOW_BODIES == ["k1"]  # the model was not asked after the body
        assert [(c.tool_name, c.status) for c in rt.session(handle.session_id).calls] == [("slow_read", "ok")]
        server.script(Text("next turn"))
        after = rt.start("stopped", "and now?", session_id=handle.session_id).result(timeout=120)
        assert (after.status, after.output) == ("completed", "next turn"), after
        assert len(server.requests()) == 2


def test_an_sdk_agent_delegates_to_an_sdk_sub_agent(make_runtime: Any) -> None:
    """``from_openai_agents(sub_agents=[hx.remote_agent(...)])``: the child is offered as
    ``subagent__<name>``, runs as its own (durable, remote) run, and its output is the call's result."""

    def answer(entry: Any) -> Any:
        offered = tools_sent(entry)
        if "subagent__helper" not in offered:
            return Text("helper says hi")
        return Text("done") if _tool_outputs(entry) else Calls([("subagent__helper", {"message": "say hi"})])

    with provider_server() as server:
        server.always(answer)
        child = hx.from_openai_agents(Agent(name="helper", model=sdk_model("chat", server), instructions="Help."))
        parent = hx.from_openai_agents(Agent(name="boss", model=sdk_model("responses", server)), sub_agents=[hx.remote_agent(child)])
        rt = make_runtime([parent])
        result = rt.start("boss", "delegate").result(timeout=120)
        assert (result.status, result.output) == ("completed", "done"), result
        (call,) = rt.session(result.session_id).calls
        assert (call.tool_name, call.status) == ("subagent__helper", "ok")
        last = [r for r in server.requests() if r.wire == "responses"][-1]
        assert "helper says hi" in json.dumps(_tool_outputs(last))


def test_the_dispatch_id_outside_helix_is_a_typed_error() -> None:
    """A tool body run by the SDK's own Runner (no helix call around it) asking for its dispatch id."""
    from helix_dbos.errors import DispatchIdUnavailableError

    with pytest.raises(DispatchIdUnavailableError):
        hx.openai_dispatch_id()
    with pytest.raises(DispatchIdUnavailableError):
        hx.openai_tool_context()
