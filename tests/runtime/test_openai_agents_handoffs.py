"""OpenAI Agents SDK handoffs and agents-as-tools under ``hx.Runtime`` (both databases).

The SDK's own ``OpenAIChatCompletionsModel`` against the loopback provider: which agent answered a
request is read from the request itself (its instructions and the tools it offered), what the run
recorded from the ledger.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from agents import Agent, OpenAIChatCompletionsModel, RunContextWrapper, function_tool, handoff
from openai import AsyncOpenAI

import helix_dbos as hx
from helix_dbos.errors import ConfigurationError, UnsupportedFeatureError
from tests.support.provider_server import Calls, ProviderServer, Status, Text, provider_server, tools_sent

EFFECTS: list[tuple[str, Any]] = []


def model(server: ProviderServer | None = None) -> OpenAIChatCompletionsModel:
    url = server.url if server is not None else "http://127.0.0.1:9/v1"
    return OpenAIChatCompletionsModel("gpt-4o", openai_client=AsyncOpenAI(api_key="test-key", base_url=url))


@hx.openai_policy(replay="safe")
@function_tool
def lookup(order: str) -> str:
    """Look an order up."""
    EFFECTS.append(("lookup", order))
    return f"{order}: paid"


@function_tool
def refund(ctx: RunContextWrapper[Any], order: str) -> str:
    """Refund an order (an effect: unsafe by default)."""
    EFFECTS.append(("refund", (order, hx.openai_dispatch_id(ctx), ctx.context)))
    return f"refunded {order}"


def instructions_of(entry: Any) -> str | None:
    first = entry.body["messages"][0]
    return first["content"] if first["role"] == "system" else None


def told(entry: Any) -> dict[str, str]:
    """What the model was told each call returned, by tool name (the last answer of each)."""
    names = {c["id"]: c["function"]["name"] for m in entry.body["messages"] for c in m.get("tool_calls") or []}
    return {names[m["tool_call_id"]]: m["content"] for m in entry.body["messages"] if m.get("role") == "tool"}


def desk(server: ProviderServer, suffix: str = "") -> Agent[Any]:
    """A triage agent that hands off to billing, which refunds."""
    billing = Agent(name=f"billing{suffix}", model=model(server), instructions="You are billing.", tools=[refund],
                    handoff_description="Refunds and invoices.")
    return Agent(name=f"triage{suffix}", model=model(server), instructions="You are triage.", tools=[lookup], handoffs=[billing])


def scripted(entry: Any) -> Any:
    """Triage hands off at once; billing refunds once, then answers."""
    said = instructions_of(entry)
    if said == "You are triage.":
        return Calls([("transfer_to_billing", {})])
    return Text("refund done") if "refund" in told(entry) else Calls([("refund", {"order": "o1"})])


def test_a_handoff_is_a_step_of_the_run_and_the_target_answers_from_then_on(make_runtime: Any) -> None:
    """The handoff call is recorded in the run (answered ``{"assistant": "billing"}``); the next
    request is billing's (its instructions, its tools, no triage tool), in the same run and session;
    billing's unsafe tool runs once with the run's context; a new turn starts with triage again."""
    with provider_server() as server:
        server.always(scripted)
        rt = make_runtime([desk(server)], deps_factories={"triage": lambda data: dict(data)})
        EFFECTS.clear()
        result = rt.start("triage", "refund my order o1", deps={"user": "ann"}).result(timeout=120)
        assert (result.status, result.output) == ("completed", "refund done"), result
        requests = server.requests()
        assert [instructions_of(r) for r in requests] == ["You are triage.", "You are billing.", "You are billing."]
        assert set(tools_sent(requests[0])) == {"lookup", "transfer_to_billing"}
        assert "Refunds and invoices." in tools_sent(requests[0])["transfer_to_billing"]["description"]
        assert set(tools_sent(requests[1])) == {"refund"}
        assert json.loads(told(requests[1])["transfer_to_billing"]) == {"assistant": "billing"}
        view = rt.session(result.session_id)
        calls = {c.tool_name: c for c in view.calls}
        assert set(calls) == {"transfer_to_billing", "refund"}
        assert {c.run_id for c in view.calls} == {result.run_id}  # one run: the handoff is one of its steps
        assert (calls["transfer_to_billing"].status, calls["transfer_to_billing"].result, calls["transfer_to_billing"].replay) == (
            "ok", {"assistant": "billing"}, "safe")
        assert (calls["refund"].status, calls["refund"].replay) == ("ok", "unsafe")
        assert calls["transfer_to_billing"].step < calls["refund"].step
        assert [("refund", ("o1", calls["refund"].dispatch_id, {"user": "ann"}))] == EFFECTS

        before = len(server.requests())
        again = rt.start("triage", "and order o2?", session_id=result.session_id).result(timeout=120)
        assert again.status == "completed", again
        assert instructions_of(server.requests()[before]) == "You are triage."  # a new turn: the agent the runtime was given


def test_a_retry_after_the_handoff_continues_with_the_agent_handed_to(make_runtime: Any) -> None:
    """The run fails after its handoff was committed (billing's request refused by the provider);
    ``retry()`` is a new run of the same turn, and its first request is billing's: the handoff is
    read from the transcript, never asked of triage again."""
    with provider_server() as server:
        server.script(Calls([("transfer_to_billing", {})]), Status(400))
        server.always(scripted)
        rt = make_runtime([desk(server)])
        EFFECTS.clear()
        failed = rt.start("triage", "refund o1").result(timeout=120)
        assert (failed.status, failed.error_code) == ("failed", "model_request_invalid"), failed
        before = len(server.requests())
        result = rt.retry(failed.session_id).result(timeout=120)
        assert (result.status, result.output) == ("completed", "refund done"), result
        assert result.run_id != failed.run_id
        asked = [instructions_of(r) for r in server.requests()]
        assert asked[:before] == ["You are triage.", "You are billing."]
        assert asked[before:] == ["You are billing.", "You are billing."]  # triage never asked again
        assert [c.tool_name for c in rt.session(result.session_id).calls] == ["transfer_to_billing", "refund"]


def test_an_agent_tools_agent_given_to_the_runtime_too_is_one_definition(make_runtime: Any) -> None:
    """The helper given to the runtime (first, with a policy mapping) is the definition the agent
    tool's child runs: the mapping reaches the child's tool, and the runtime holds one ``helper``."""

    def answer(entry: Any) -> Any:
        if instructions_of(entry) == "You help.":
            return Text("helped") if "refund" in told(entry) else Calls([("refund", {"order": "o3"})])
        return Text("done") if "ask_helper" in told(entry) else Calls([("ask_helper", {"message": "refund o3"})])

    with provider_server() as server:
        server.always(answer)
        helper = Agent(name="helper", model=model(server), instructions="You help.", tools=[refund])
        boss = Agent(name="boss", model=model(server), tools=[helper.as_tool(tool_name="ask_helper", tool_description="Ask.")])
        other_boss = Agent(name="other_boss", model=model(server), tools=[helper.as_tool(tool_name="ask_helper", tool_description="Ask.")])
        rt = make_runtime([helper, boss, other_boss], tool_policies={"helper": {"refund": {"replay": "safe"}}})
        result = rt.start("boss", "refund o3").result(timeout=120)
        assert (result.status, result.output) == ("completed", "done"), result
        (call,) = rt.session(result.session_id).calls
        (inner,) = rt.session(call.child_session_id).calls
        assert (inner.tool_name, inner.status, inner.replay) == ("refund", "ok", "safe")


def test_a_tool_the_answering_agent_was_not_offered_is_an_unknown_tool(make_runtime: Any) -> None:
    """The definition holds every agent's tools (recovery judges any saved call), but a call to a
    tool of another agent than the one answering never runs: it is answered as an unknown tool."""

    def answer(entry: Any) -> Any:
        if instructions_of(entry) == "You are triage.":
            return Text("ok then") if "refund" in told(entry) else Calls([("refund", {"order": "o1"})])
        raise AssertionError("billing was never handed to")

    with provider_server() as server:
        server.always(answer)
        rt = make_runtime([desk(server, "")])
        EFFECTS.clear()
        result = rt.start("triage", "refund o1").result(timeout=120)
        assert (result.status, result.output) == ("completed", "ok then"), result
        (call,) = rt.session(result.session_id).calls
        assert (call.tool_name, call.status) == ("refund", "error")
        assert "Unknown tool name" in told(server.requests()[1])["refund"]
        assert EFFECTS == []


def test_a_handoff_with_on_handoff_runs_it_once_and_is_unsafe(make_runtime: Any) -> None:
    seen: list[Any] = []

    class Reason(pydantic.BaseModel):
        reason: str

    async def noted(ctx: RunContextWrapper[Any], data: Reason) -> None:
        seen.append((data.reason, hx.openai_dispatch_id(ctx)))

    def answer(entry: Any) -> Any:
        if instructions_of(entry) == "You are triage.":
            return Calls([("to_billing", {"reason": "refund"})])
        return Text("billing here")

    with provider_server() as server:
        server.always(answer)
        billing = Agent(name="billing", model=model(server), instructions="You are billing.")
        triage = Agent(name="triage", model=model(server), instructions="You are triage.",
                       handoffs=[handoff(billing, tool_name_override="to_billing", on_handoff=noted, input_type=Reason)])
        rt = make_runtime([triage])
        result = rt.start("triage", "hi").result(timeout=120)
        assert (result.status, result.output) == ("completed", "billing here"), result
        (call,) = rt.session(result.session_id).calls
        assert (call.tool_name, call.status, call.replay) == ("to_billing", "ok", "unsafe")
        assert seen == [("refund", call.dispatch_id)]


def test_an_agent_tool_runs_as_a_remote_sub_agent_under_its_own_name(make_runtime: Any) -> None:
    """``helper.as_tool(tool_name=..., tool_description=...)``: offered under its name and
    description, run as a child run of its own (its tool keeps its policy and runs once), and its
    output is the call's one answer."""

    def answer(entry: Any) -> Any:
        if instructions_of(entry) == "You help.":
            return Text("helper refunded") if "refund" in told(entry) else Calls([("refund", {"order": "o9"})])
        return Text("all done") if "ask_helper" in told(entry) else Calls([("ask_helper", {"message": "refund o9"})])

    with provider_server() as server:
        server.always(answer)
        helper = Agent(name="helper", model=model(server), instructions="You help.", tools=[refund])
        boss = Agent(name="boss", model=model(server), instructions="You lead.",
                     tools=[lookup, helper.as_tool(tool_name="ask_helper", tool_description="Ask the helper to refund.")])
        rt = make_runtime([boss])
        EFFECTS.clear()
        result = rt.start("boss", "refund o9 through the helper").result(timeout=120)
        assert (result.status, result.output) == ("completed", "all done"), result
        offered = tools_sent(server.requests()[0])
        assert set(offered) == {"lookup", "ask_helper"}
        assert offered["ask_helper"]["description"] == "Ask the helper to refund."
        (call,) = rt.session(result.session_id).calls
        assert (call.tool_name, call.kind, call.status, call.result) == ("ask_helper", "remote", "ok", "helper refunded")
        child = rt.session(call.child_session_id)
        (inner,) = child.calls
        assert (inner.tool_name, inner.status, inner.replay) == ("refund", "ok", "unsafe")
        assert [e[0] for e in EFFECTS] == ["refund"]


def test_what_handoffs_and_agent_tools_cannot_honour_is_refused() -> None:
    other = Agent(name="other", model=model())
    typed = Agent(name="typed", model=model(), output_type=int)
    refused: list[tuple[Agent[Any], str]] = [
        (Agent(name="a", model=model(), handoffs=[handoff(other, input_filter=lambda data: data)]), "input_filter"),
        (Agent(name="a", model=model(), handoffs=[typed]), "output_type"),
        (Agent(name="a", model=model(), tools=[other.as_tool(tool_name="t", tool_description="d", max_turns=3)]), "max_turns"),
        (Agent(name="a", model=model(), tools=[other.as_tool(tool_name="t", tool_description="d", needs_approval=True)]), "needs_approval"),
        (Agent(name="a", model=model(), tools=[other.as_tool(tool_name="t", tool_description="d", parameters=pydantic.BaseModel)]), "parameters"),
    ]
    for agent, what in refused:
        with pytest.raises(UnsupportedFeatureError, match=what):
            hx.from_openai_agents(agent)
    twin = Agent(name="other", model=model())
    with pytest.raises(ConfigurationError, match="two different agents named 'other'"):
        hx.from_openai_agents(Agent(name="a", model=model(), handoffs=[other, Agent(name="b", model=model(), handoffs=[twin])]))


def test_guardrails_are_the_entry_agents_on_input_and_the_answering_agents_on_output(make_runtime: Any) -> None:
    """As the SDK's runner runs them: triage's input guardrail on the user's message, billing's
    output guardrail on the output billing gave; neither of the other agent's."""
    from agents import GuardrailFunctionOutput, InputGuardrail, OutputGuardrail

    ran: list[tuple[str, str, Any]] = []

    def guard(stage: str, who: str) -> Any:
        def check(ctx: RunContextWrapper[Any], agent: Agent[Any], given: Any) -> GuardrailFunctionOutput:
            ran.append((stage, who, given))
            return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)
        return check

    with provider_server() as server:
        server.always(scripted)
        billing = Agent(name="billing", model=model(server), instructions="You are billing.", tools=[refund],
                        input_guardrails=[InputGuardrail(guardrail_function=guard("input", "billing"))],
                        output_guardrails=[OutputGuardrail(guardrail_function=guard("output", "billing"))])
        triage = Agent(name="triage", model=model(server), instructions="You are triage.", handoffs=[billing],
                       input_guardrails=[InputGuardrail(guardrail_function=guard("input", "triage"))],
                       output_guardrails=[OutputGuardrail(guardrail_function=guard("output", "triage"))])
        rt = make_runtime([triage])
        result = rt.start("triage", "refund o1").result(timeout=120)
        assert (result.status, result.output) == ("completed", "refund done"), result
        assert ran == [("input", "triage", "refund o1"), ("output", "billing", "refund done")]
