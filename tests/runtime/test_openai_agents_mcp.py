"""An OpenAI Agents SDK agent's ``mcp_servers`` under ``hx.Runtime`` (both databases).

The SDK's own ``MCPServerStdio`` starts the real scenario server (``tests/scenarios/mcp_server.py``),
whose tools count their own bodies in a fsynced file with the dispatch id each call carried; the
model is a scripted ``agents.Model`` whose reply is a function of the items it is sent. What the
model was offered and told is what the model itself recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from agents import Agent, Model, ModelResponse, Usage
from agents.mcp import MCPServerStdio

import helix_dbos as hx
from helix_dbos.adapters.openai_agents.mcp import close_servers
from helix_dbos.errors import UnsupportedFeatureError
from tests.scenarios.oai_mcp_app import call, text
from tests.support.waiting import wait_for

SERVER = Path(__file__).resolve().parents[1] / "scenarios" / "mcp_server.py"

#: ``(step, what the model was told by call id) -> the reply's output items``
Reply = Callable[[int, dict[str, str]], list[Any]]


class Scripted(Model):
    """An ``agents.Model`` whose reply is ``reply(step, told)``; it records what it was offered and told."""

    model = "scripted"

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.seen: list[dict[str, Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, output_schema: Any,
                           handoffs: Any, tracing: Any, *, previous_response_id: Any = None, conversation_id: Any = None,
                           prompt: Any = None) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        told = {i["call_id"]: str(i["output"]) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"}
        step = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call")  # calls made so far
        self.seen.append({"step": step, "told": told, "tools": {t.name: t for t in tools}})
        return ModelResponse(output=self.reply(step, told), usage=Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2),
                             response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def stdio_server(effects: Path, **kw: Any) -> MCPServerStdio:
    return MCPServerStdio(params={"command": sys.executable, "args": [str(SERVER), "--effects", str(effects), "stdio"], "env": dict(os.environ)},
                          name="inventory", client_session_timeout_seconds=120, **kw)


def bodies(effects: Path) -> list[dict[str, Any]]:
    path = effects / "mcp_bodies.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def alive(pid: int) -> bool:
    """Whether the server process ``pid`` still exists (its parent, the SDK's client, reaps it when it closes)."""
    return Path(f"/proc/{pid}").exists()


@pytest.fixture
def effects(tmp_path: Path) -> Any:
    folder = tmp_path / "effects"
    folder.mkdir()
    yield folder
    close_servers()  # this test's server processes end with it


def test_mcp_tools_are_offered_and_each_call_goes_through_the_ledger(make_runtime: Any, effects: Path) -> None:
    """The server's tools are listed and offered with the schema it gave; each call is saved with a
    dispatch id before it is sent (the server receives that id in the call's ``_meta``), answered
    once, and its policy comes from the tool's annotations: readOnlyHint -> safe, destructive -> unsafe."""

    def reply(step: int, told: dict[str, str]) -> list[Any]:
        if step == 0:
            return [call("read_stock", {"key": "k0"}, "c0"), call("delete_item", {"key": "k1"}, "c1")]
        return [text("done")]

    model = Scripted(reply)
    agent = hx.from_openai_agents(Agent(name="stockist", model=model, mcp_servers=[stdio_server(effects)]))
    rt = make_runtime([agent])
    result = rt.start("stockist", "clear k1").result(timeout=120)
    assert (result.status, result.output) == ("completed", "done"), result

    offered = model.seen[0]["tools"]
    assert {"read_stock", "delete_item", "hang", "die"} <= set(offered)
    assert offered["read_stock"].params_json_schema["properties"] == {"key": {"title": "Key", "type": "string"}}
    calls = {c.tool_name: c for c in rt.session(result.session_id).calls}
    assert {n: (c.status, c.replay, len(c.attempts)) for n, c in calls.items()} == {
        "read_stock": ("ok", "safe", 1), "delete_item": ("ok", "unsafe", 1)}
    ran = bodies(effects)
    assert Counter(b["tool"] for b in ran) == Counter({"read_stock": 1, "delete_item": 1})
    assert {b["tool"]: b["dispatch_id"] for b in ran} == {n: c.dispatch_id for n, c in calls.items()}
    told = {k: json.loads(v) for k, v in model.seen[1]["told"].items()}  # the SDK's text output, as the ledger stored it
    assert told == {"c0": {"type": "text", "text": "k0: 7 in stock"}, "c1": {"type": "text", "text": "k1 deleted"}}
    tools = {t.name: t for t in agent.tools}
    assert (tools["read_stock"].policy_source, tools["delete_item"].policy_source) == ("mcp_annotations", "mcp_annotations")


def test_the_runtimes_mapping_wins_over_the_annotations(make_runtime: Any, effects: Path) -> None:
    """``tool_policies`` by the MCP tool's name: a read-only tool made to ask a human first; the call
    suspends for approval, and runs once when approved (the server's own count)."""

    def reply(step: int, told: dict[str, str]) -> list[Any]:
        return [call("read_stock", {"key": "k9"}, "c0")] if step == 0 else [text(told["c0"])]

    sdk_agent = Agent(name="guarded", model=Scripted(reply), mcp_servers=[stdio_server(effects)])
    agent = hx.from_openai_agents(sdk_agent, tool_policies={"read_stock": {"requires_approval": True, "replay": "unsafe"}})
    rt = make_runtime([agent])
    result = rt.start("guarded", "count k9").result(timeout=120)
    assert result.status.startswith("suspended"), result
    (pending,) = result.pending
    assert (pending.tool_name, pending.kind) == ("read_stock", "approval") and bodies(effects) == []
    tool = agent.tool("read_stock")
    assert tool is not None and (tool.replay, tool.policy_source) == ("unsafe", "mapping")  # type: ignore[attr-defined]
    receipt = rt.approve(result.session_id, pending.dispatch_id)
    assert receipt.run is not None
    final = receipt.run.result(timeout=120)
    assert final.status == "completed" and "k9: 7 in stock" in str(final.output), final
    assert [(b["tool"], b["dispatch_id"]) for b in bodies(effects)] == [("read_stock", pending.dispatch_id)]


def test_a_hung_call_and_a_dead_server_give_typed_errors_and_the_server_is_started_again(make_runtime: Any, effects: Path) -> None:
    """A call that never answers is ``ToolTimeoutError`` within the agent's tool_timeout; a server that
    dies mid-call is ``ToolServerError``; the next call starts the server again and is answered."""

    def reply(step: int, told: dict[str, str]) -> list[Any]:
        script = {0: [call("hang", {"key": "h"}, "h1")], 1: [call("die", {"key": "d"}, "d1")], 2: [call("read_stock", {"key": "r"}, "r1")]}
        return script.get(step, [text("recovered")])

    model = Scripted(reply)
    agent = hx.from_openai_agents(Agent(name="fragile", model=model, mcp_servers=[stdio_server(effects)]), tool_timeout=3.0)
    rt = make_runtime([agent])
    result = rt.start("fragile", "try").result(timeout=180)
    assert (result.status, result.output) == ("completed", "recovered"), result
    calls = {c.tool_name: c for c in rt.session(result.session_id).calls}
    assert calls["hang"].status == "error" and calls["hang"].error["type"] == "ToolTimeoutError"
    assert calls["die"].status == "error" and calls["die"].error["type"] == "ToolServerError"
    assert calls["read_stock"].status == "ok"
    assert "no answer within 3 s" in model.seen[1]["told"]["h1"] and "unavailable" in model.seen[2]["told"]["d1"]
    ran = bodies(effects)
    assert [b["tool"] for b in ran] == ["hang", "die", "read_stock"]
    assert ran[0]["pid"] == ran[1]["pid"] != ran[2]["pid"]  # the dead server was started again for the next call


def test_the_catalog_lists_the_servers_tools_before_any_run_and_says_which_server_is_down(make_runtime: Any, effects: Path) -> None:
    """``GET /agents``' catalog outside any run: the live server's tools with their policies, the
    server that cannot start named with why; the connection is closed by ``close_servers`` (its
    process ends) and opened again by the next listing."""
    down = MCPServerStdio(params={"command": sys.executable, "args": ["-c", "raise SystemExit(1)"]}, name="down",
                          client_session_timeout_seconds=5)

    def reply(step: int, told: dict[str, str]) -> list[Any]:
        return [call("read_stock", {"key": "a"}, "c0")] if step == 0 else [text("ok")]

    agent = hx.from_openai_agents(Agent(name="cataloged", model=Scripted(reply), mcp_servers=[stdio_server(effects), down]))
    tools, unlisted = asyncio.run(agent.catalog())
    assert {t.name: t.replay for t in tools} == {"read_stock": "safe", "delete_item": "unsafe", "hang": "unsafe", "die": "unsafe"}
    assert [u["toolset"] for u in unlisted] == ["down"] and unlisted[0]["error"]
    rt = make_runtime([agent])
    first = rt.start("cataloged", "a").result(timeout=120)
    assert first.status == "completed", first
    pid = bodies(effects)[0]["pid"]
    close_servers()
    wait_for("the stdio server to end", lambda: not alive(pid))
    again = rt.start("cataloged", "a").result(timeout=120)
    assert again.status == "completed", again
    assert [b["pid"] for b in bodies(effects)][1] != pid


def test_a_server_setting_the_adapter_cannot_honour_is_refused_when_the_agent_is_read(effects: Path) -> None:
    from agents import ToolGuardrailFunctionOutput, ToolInputGuardrail

    def check(*_: Any) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.allow()

    guarded = stdio_server(effects, tool_input_guardrails=[ToolInputGuardrail(guardrail_function=check)])
    with pytest.raises(UnsupportedFeatureError, match="tool guardrails"):
        hx.from_openai_agents(Agent(name="g", model=Scripted(lambda s, t: []), mcp_servers=[guarded]))
    extracting = stdio_server(effects, custom_data_extractor=lambda ctx: None)
    with pytest.raises(UnsupportedFeatureError, match="custom_data_extractor"):
        hx.from_openai_agents(Agent(name="c", model=Scripted(lambda s, t: []), mcp_servers=[extracting]))
    assert bodies(effects) == []  # nothing was started for a refused agent


def test_an_agent_handed_to_offers_and_calls_its_own_mcp_servers_tools(make_runtime: Any, effects: Path) -> None:
    """A handoff's target with ``mcp_servers`` lists them through its own links: the entry agent is
    offered none of them, the agent handed to is, and its calls go through the ledger by their annotations."""
    triage = Scripted(lambda step, told: [call("transfer_to_stockist", {}, "h0")] if step == 0 else [text("triage again?")])
    stock = Scripted(lambda step, told: [call("read_stock", {"key": "k0"}, "c0")] if step == 1 else [text("counted")])
    stockist = Agent(name="stockist", model=stock, mcp_servers=[stdio_server(effects)])
    rt = make_runtime([hx.from_openai_agents(Agent(name="triage", model=triage, handoffs=[stockist]))])
    result = rt.start("triage", "how many k0?").result(timeout=120)
    assert (result.status, result.output) == ("completed", "counted"), result
    assert "read_stock" not in triage.seen[0]["tools"] and "read_stock" in stock.seen[0]["tools"]
    calls = {c.tool_name: (c.status, c.replay, len(c.attempts)) for c in rt.session(result.session_id).calls}
    assert calls == {"transfer_to_stockist": ("ok", "safe", 1), "read_stock": ("ok", "safe", 1)}
    assert Counter(b["tool"] for b in bodies(effects)) == Counter({"read_stock": 1})
