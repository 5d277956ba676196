"""A plain ``pydantic_ai.Agent`` handed to ``hx.Runtime`` as it is: its tools, toolsets, deps,
instructions, output type and validators run on the run workflow and ledger (both databases)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pydantic
import pytest
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.exceptions import CallDeferred
from pydantic_ai.messages import ToolReturn
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import ExternalToolset, FunctionToolset
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import UsageLimits

import sqlalchemy as sa

import helix_dbos as hx
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.adapters.pydantic_ai.agent import resolve_policy
from helix_dbos.errors import ConfigurationError, UnsupportedFeatureError, ValidationError
from tests.conftest import one_database


class Booking(pydantic.BaseModel):
    venue: str
    seats: int


@dataclass
class Deps:
    user: str
    effects: list[str]


def _call_rows(db_url: str, session_id: str) -> list[dict[str, Any]]:
    """The session's ``calls`` rows as the ledger holds them (policy columns the views do not show)."""
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(t.calls).where(t.calls.c.session_id == session_id)).mappings()]
    finally:
        engine.dispose()


def _calls(messages: list[ModelMessage]) -> int:
    return sum(isinstance(m, ModelResponse) for m in messages)


def build_agent(seen: dict[str, Any], effects: list[str]) -> Agent[Deps, Booking]:
    """A pydantic-ai agent as a user writes one: nothing in it knows about helix_dbos."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = _calls(messages)
        seen.setdefault("instructions", []).append(info.instructions)
        seen.setdefault("settings", []).append(info.model_settings)
        seen.setdefault("tools", []).append(sorted(t.name for t in info.function_tools))
        seen.setdefault("messages", []).append(messages)
        if n == 0:
            return ModelResponse(parts=[
                ToolCallPart("lookup", {"q": "thai"}, "c1"),
                ToolCallPart("book", {"venue": "Siam", "seats": 2}, "c2"),
                ToolCallPart("greet", {"name": "ann"}, "c3"),
            ])
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("final_result", {"venue": "Siam", "seats": 200}, "c4")])
        return ModelResponse(parts=[ToolCallPart("final_result", {"venue": "Siam", "seats": 2}, "c5")])

    shared = FunctionToolset[Deps]()

    @shared.tool_plain(metadata={"replay": "safe"})
    def lookup(q: str) -> list[str]:
        """Find venues."""
        effects.append(f"lookup:{q}")
        return ["Siam", "Thai Garden"]

    agent = Agent(
        FunctionModel(reply),
        name="concierge",
        deps_type=Deps,
        output_type=Booking,
        instructions="You book tables.",
        toolsets=[shared],
        model_settings={"temperature": 0.2},
    )

    @agent.instructions
    def who(ctx: RunContext[Deps]) -> str:
        return f"The user is {ctx.deps.user}."

    @agent.tool(metadata={"concurrency_group": "venue"})
    def book(ctx: RunContext[Deps], venue: str, seats: int) -> dict[str, Any]:
        """Book a table."""
        ctx.deps.effects.append(f"book:{venue}:{seats}:{hx.dispatch_id(ctx)}")
        effects.append(f"book:{venue}")
        return {"ok": True, "user": ctx.deps.user, "dispatch_id": hx.dispatch_id(ctx), "tool_call_id": ctx.tool_call_id}

    @agent.tool_plain(sequential=True)
    def greet(name: str) -> str:
        effects.append(f"greet:{name}")
        return f"hello {name}"

    @agent.output_validator
    def sane(ctx: RunContext[Deps], out: Booking) -> Booking:
        if out.seats > 20:
            raise ModelRetry(f"{out.seats} seats is too many for {ctx.deps.user}")
        return out

    return agent


def test_plain_pydantic_agent_runs_on_the_ledger(make_runtime: Any, db_url: str) -> None:
    seen: dict[str, Any] = {}
    effects: list[str] = []
    deps_effects: list[str] = []
    built: list[Any] = []

    def make_deps(data: Any) -> Deps:
        built.append(data)
        return Deps(user=data["user"], effects=deps_effects)

    agent = build_agent(seen, effects)
    rt = make_runtime([agent], deps_factories={"concierge": make_deps}, tool_policies={"concierge": {"greet": {"replay": "safe"}}})
    result = rt.start("concierge", "a table for two, thai", deps={"user": "ann"}).result(timeout=60)

    assert result.status == "completed", result
    assert result.output == {"venue": "Siam", "seats": 2}
    assert sorted(effects) == ["book:Siam", "greet:ann", "lookup:thai"]  # each body once
    assert built == [{"user": "ann"}]  # the factory fed the stored JSON, once per run in this process
    # static + dynamic instructions (deps), and the model settings, on every model request
    assert seen["instructions"] == ["You book tables.\n\nThe user is ann."] * 3
    assert seen["settings"][0]["temperature"] == 0.2
    assert seen["tools"][0] == ["book", "greet", "lookup"]

    view = rt.session(result.session_id)
    calls = {c.tool_name + ":" + str(c.step): c for c in view.calls}
    assert calls["lookup:0"].replay == "safe"  # from the tool's metadata
    assert calls["greet:0"].replay == "safe"  # from the runtime's mapping
    assert calls["book:0"].replay == "unsafe"  # the default
    rows = {r["tool_name"]: r for r in _call_rows(db_url, result.session_id) if r["step"] == 0}
    policy = {k: (r["replay"], r["concurrency_group"], r["sequential"], r["requires_approval"]) for k, r in rows.items()}
    assert policy == {
        "lookup": ("safe", None, False, False),  # metadata
        "book": ("unsafe", "venue", False, False),  # metadata's group; replay the default
        "greet": ("safe", None, True, False),  # pydantic-ai's sequential=True; replay from the mapping
    }
    booked = calls["book:0"].result
    assert booked["user"] == "ann" and booked["dispatch_id"] == calls["book:0"].dispatch_id and booked["tool_call_id"] == "c2"
    assert deps_effects == [f"book:Siam:2:{calls['book:0'].dispatch_id}"]
    # the validator's ModelRetry went back to the model as a retry prompt, not a failed run
    last = seen["messages"][2][-1]
    retry = [p for p in last.parts if getattr(p, "tool_call_id", None) == "c4"]
    assert retry and "200 seats is too many for ann" in str(retry[0].content) and retry[0].outcome == "retried"
    assert any(isinstance(p, ToolReturnPart) for p in seen["messages"][1][-1].parts)


def test_pydantic_flags_approval_and_external_tools(make_runtime: Any) -> None:
    effects: list[str] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _calls(messages) == 0:
            return ModelResponse(parts=[ToolCallPart("wire", {"amount": 5}, "w1"), ToolCallPart("ask_user", {"q": "ok?"}, "a1")])
        return ModelResponse(parts=[TextPart("done")])

    external = ExternalToolset([ToolDefinition(name="ask_user", parameters_json_schema={
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})])
    agent = Agent(FunctionModel(reply), name="payer", toolsets=[external])

    @agent.tool_plain(requires_approval=True)
    def wire(amount: int) -> str:
        effects.append(f"wire:{amount}")
        return "sent"

    rt = make_runtime([agent])
    result = rt.start("payer", "pay").result(timeout=60)
    assert result.status.startswith("suspended")
    pending = {p.tool_name: p for p in result.pending}
    assert pending["wire"].kind == "approval" and pending["ask_user"].kind == "client"
    rt.approve(result.session_id, pending["wire"].dispatch_id)
    receipt = rt.submit_tool_result(result.session_id, pending["ask_user"].dispatch_id, result="yes")
    assert receipt.run is not None
    final = receipt.run.result(timeout=60)
    assert final.status == "completed" and final.output == "done"
    assert effects == ["wire:5"]


def test_approval_required_toolset_is_the_runtimes_gate(make_runtime: Any, db_url: str) -> None:
    """``toolset.approval_required(rule)`` (the usual gate on MCP tools): the rule is asked per call
    when the reply is planned, a gated call suspends for ``approve``, an approved one runs once with
    ``ctx.tool_call_approved``, a denied one never runs, and one the rule lets pass runs straight."""
    effects: list[str] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _calls(messages) == 0:
            return ModelResponse(parts=[ToolCallPart("db_purge", {"table": "users"}, "p1"),
                                        ToolCallPart("db_purge", {"table": "orders"}, "p2"),
                                        ToolCallPart("db_purge", {"table": "tmp"}, "p3")])
        return ModelResponse(parts=[TextPart("done")])

    ops = FunctionToolset[None]()

    @ops.tool
    def purge(ctx: RunContext[None], table: str) -> str:
        effects.append(f"purge:{table}:{ctx.tool_call_approved}")
        return "purged"

    rules: list[tuple[str, str]] = []

    def risky(ctx: RunContext[None], tool_def: ToolDefinition, args: dict[str, Any]) -> bool:
        rules.append((tool_def.name, args["table"]))
        return args["table"] != "tmp"

    agent = Agent(FunctionModel(reply), name="dba", toolsets=[ops.approval_required(risky).prefixed("db")])
    rt = make_runtime([agent])
    result = rt.start("dba", "clean up").result(timeout=60)
    assert result.status.startswith("suspended"), result
    pending = {p.args["table"]: p for p in result.pending}
    assert sorted(pending) == ["orders", "users"] and {p.kind for p in pending.values()} == {"approval"}
    assert effects == ["purge:tmp:True"]  # the rule let it pass: it ran without asking anyone
    assert ("purge", "users") in rules  # the rule saw the toolset's own name for the tool
    rt.approve(result.session_id, pending["users"].dispatch_id)
    receipt = rt.approve(result.session_id, pending["orders"].dispatch_id, approved=False, reason="keep orders")
    assert receipt.run is not None
    final = receipt.run.result(timeout=60)
    assert final.status == "completed" and final.output == "done", final
    assert effects == ["purge:tmp:True", "purge:users:True"]  # approved: once, with tool_call_approved
    calls = {c.args["table"]: c for c in rt.session(result.session_id).calls}
    assert (calls["users"].status, calls["users"].approved, len(calls["users"].attempts)) == ("ok", True, 1)
    assert (calls["orders"].status, calls["orders"].approved, calls["orders"].attempts) == ("denied", False, [])
    assert (calls["tmp"].status, calls["tmp"].approved, len(calls["tmp"].attempts)) == ("ok", None, 1)
    rows = {r["args"]["table"]: r["requires_approval"] for r in _call_rows(db_url, result.session_id)}
    assert rows == {"users": True, "orders": True, "tmp": False}


def test_resolve_policy_sources() -> None:
    plain = ToolDefinition(name="t", parameters_json_schema={})
    assert resolve_policy(plain, "function", None) == (
        {"replay": "unsafe", "concurrency_group": None, "sequential": False, "requires_approval": False, "client": False}, "default")
    meta = ToolDefinition(name="t", metadata={"replay": "safe", "concurrency_group": "db", "requires_approval": True})
    policy, source = resolve_policy(meta, "function", None)
    assert (policy["replay"], policy["concurrency_group"], policy["requires_approval"], source) == ("safe", "db", True, "metadata")
    assert resolve_policy(meta, "function", {"replay": "unsafe"})[0]["replay"] == "unsafe"  # the mapping wins
    ro = ToolDefinition(name="m", metadata={"annotations": {"readOnlyHint": True}})
    idem = ToolDefinition(name="m", metadata={"annotations": {"idempotentHint": True, "destructiveHint": True}})
    destructive = ToolDefinition(name="m", metadata={"annotations": {"readOnlyHint": False, "destructiveHint": True}})
    bare = ToolDefinition(name="m", metadata={"annotations": None})
    assert resolve_policy(ro, "mcp", None) == (resolve_policy(ro, "mcp", None)[0], "mcp_annotations")
    assert [resolve_policy(d, "mcp", None)[0]["replay"] for d in (ro, idem, destructive, bare)] == ["safe", "safe", "unsafe", "unsafe"]
    assert resolve_policy(ro, "mcp", {"replay": "unsafe"})[0]["replay"] == "unsafe"
    assert resolve_policy(ToolDefinition(name="s", sequential=True), "function", None)[0]["sequential"] is True
    assert resolve_policy(ToolDefinition(name="e", kind="external"), "function", None)[0]["client"] is True
    with pytest.raises(ConfigurationError):
        resolve_policy(ToolDefinition(name="x", metadata={"replay": "maybe"}), "function", None)
    with pytest.raises(ConfigurationError):
        resolve_policy(plain, "function", {"retry": True})


def test_refused_features_are_typed() -> None:
    model = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")]))
    with pytest.raises(ConfigurationError, match="no name is stable across processes"):
        hx.from_pydantic_ai(Agent(model))  # bound to no variable: nothing to infer a name from
    with pytest.raises(ConfigurationError, match="no model"):
        hx.from_pydantic_ai(Agent(name="nomodel"))
    prompted = Agent(model, name="p")

    @prompted.system_prompt
    def sp() -> str:
        return "x"

    with pytest.raises(UnsupportedFeatureError) as err:
        hx.from_pydantic_ai(prompted)
    assert err.value.code == "unsupported_feature"
    assert hx.from_pydantic_ai(Agent(model, name="u"), usage_limits=UsageLimits(request_limit=7)).max_steps == 7
    texty = Agent(model, name="t")
    texty.output_validator(lambda s: s)
    with pytest.raises(UnsupportedFeatureError, match="text output"):
        hx.from_pydantic_ai(texty)
    with pytest.raises(ConfigurationError):
        hx.Runtime([object()])  # type: ignore[list-item]
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    with pytest.raises(UnsupportedFeatureError, match="the runtime is the durability"):
        hx.from_pydantic_ai(Agent(model, name="durable", capabilities=[DBOSDurability()]))
    from pydantic_ai.capabilities import NativeTool
    from pydantic_ai.native_tools import WebSearchTool

    with pytest.raises(UnsupportedFeatureError, match="NativeTool"):  # provider-executed tools
        hx.from_pydantic_ai(Agent(model, name="web", capabilities=[NativeTool(WebSearchTool())]))


@one_database  # deps are validated before anything is stored
def test_deps_must_be_json(make_runtime: Any) -> None:
    agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])), name="d")
    rt = make_runtime([agent])
    with pytest.raises(ValidationError):
        rt.start("d", "hi", deps=object())
    with rt.engine.connect() as conn:
        import sqlalchemy as sa

        from helix_dbos.ledger import tables as t

        assert conn.execute(sa.select(sa.func.count()).select_from(t.runs)).scalar() == 0


def test_tool_extras_args_validator_tool_return_and_deferral(make_runtime: Any) -> None:
    """A tool's ``args_validator=`` retries like pydantic-ai's; a ``ToolReturn`` answers with its value;
    raising ``CallDeferred`` in a body is refused with a typed error the model reads."""
    effects: list[str] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = _calls(messages)
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("pick", {"n": -1}, "p1"), ToolCallPart("rich", {}, "r1"), ToolCallPart("later", {}, "l1")])
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("pick", {"n": 3}, "p2")])
        return ModelResponse(parts=[TextPart("ok")])

    def positive(ctx: RunContext[None], n: int) -> None:
        if n < 0:
            raise ModelRetry("n must be positive")

    # a callable agent metadata= is resolved with the run's RunContext; the runtime's own key stays beside it
    agent = Agent(FunctionModel(reply), name="extras", metadata=lambda ctx: {"team": "ops", "run": ctx.run_id})

    @agent.tool_plain(args_validator=positive)
    def pick(n: int) -> int:
        effects.append(f"pick:{n}")
        return n * 2

    @agent.tool
    def rich(ctx: RunContext[None]) -> ToolReturn:
        value = {"v": 1, "team": ctx.metadata["team"], "same_run": ctx.metadata["run"] == ctx.run_id,
                 "dispatch_id": hx.dispatch_id(ctx)}
        return ToolReturn(return_value=value, content="for the model's eyes")

    @agent.tool_plain
    def later() -> str:
        raise CallDeferred()

    rt = make_runtime([agent])
    result = rt.start("extras", "go").result(timeout=60)
    assert result.status == "completed"
    calls = [(c.tool_name, c.status, c.result, (c.error or {}).get("type")) for c in rt.session(result.session_id).calls]
    assert calls[0] == ("pick", "error", None, "ModelRetry")
    rich_call = rt.session(result.session_id).calls[1]
    assert calls[1] == ("rich", "ok", {"v": 1, "team": "ops", "same_run": True, "dispatch_id": rich_call.dispatch_id}, None)
    assert calls[2][:2] == ("later", "error") and calls[2][3] == "UnsupportedFeatureError"
    assert calls[3] == ("pick", "ok", 6, None)
    assert effects == ["pick:3"]  # the rejected arguments never reached the body


def test_pydantic_agent_as_remote_sub_agent(make_runtime: Any) -> None:
    def child_reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _calls(messages) == 0:
            return ModelResponse(parts=[ToolCallPart("shout", {"text": "hi"}, "s1")])
        return ModelResponse(parts=[TextPart("child says HI")])

    child = Agent(FunctionModel(child_reply), name="child")

    @child.tool_plain(metadata={"replay": "safe"})
    def shout(text: str) -> str:
        return text.upper()

    def parent_reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _calls(messages) == 0:
            return ModelResponse(parts=[ToolCallPart("subagent__child", {"message": "greet"}, "k1")])
        return ModelResponse(parts=[TextPart("parent done")])

    adapted_child = hx.from_pydantic_ai(child)
    with pytest.raises(UnsupportedFeatureError):
        hx.local_agent(adapted_child)
    parent = hx.from_pydantic_ai(Agent(FunctionModel(parent_reply), name="parent"), sub_agents=[hx.remote_agent(adapted_child)])
    rt = make_runtime([parent])
    result = rt.start("parent", "go").result(timeout=60)
    assert result.status == "completed" and result.output == "parent done"
    call = rt.session(result.session_id).calls[0]
    assert call.status == "ok" and call.result == "child says HI"
    child_calls = rt.session(call.child_session_id).calls
    assert [(c.tool_name, c.replay, c.result) for c in child_calls] == [("shout", "safe", "HI")]


def test_usage_limits_fail_the_run_typed(make_runtime: Any) -> None:
    """pydantic-ai's token and tool-call limits hold over a run: the run fails
    ``usage_limit_exceeded`` with the reply that went over recorded, and no body of it runs."""
    from pydantic_ai.usage import RequestUsage

    ran: list[str] = []

    def reply(messages: list[Any], info: Any) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("note", {"text": "a"}, tool_call_id="c1"), ToolCallPart("note", {"text": "b"}, tool_call_id="c2")],
                                 usage=RequestUsage(input_tokens=40, output_tokens=10))
        return ModelResponse(parts=[TextPart("done")], usage=RequestUsage(input_tokens=40, output_tokens=10))

    def build(name: str, limits: UsageLimits) -> Any:
        agent = Agent(FunctionModel(reply), name=name)

        @agent.tool_plain(metadata={"replay": "safe"})
        def note(text: str) -> str:
            ran.append(text)
            return text

        return hx.from_pydantic_ai(agent, usage_limits=limits)

    calls = build("calls", UsageLimits(tool_calls_limit=1))
    tokens = build("tokens", UsageLimits(total_tokens_limit=80))
    fine = build("fine", UsageLimits(total_tokens_limit=1000, tool_calls_limit=5))
    rt = make_runtime([calls, tokens, fine])
    over = rt.start("calls", "go").result(timeout=60)
    assert (over.status, over.error_code) == ("failed", "usage_limit_exceeded") and ran == [], (over, ran)
    assert "tool_calls_limit" in (over.error or "")
    over = rt.start("tokens", "go").result(timeout=60)  # 50 tokens, then 100 > 80 at the second request
    assert (over.status, over.error_code) == ("failed", "usage_limit_exceeded") and sorted(ran) == ["a", "b"], (over, ran)
    ok = rt.start("fine", "go").result(timeout=60)
    assert ok.status == "completed" and ok.output == "done"
