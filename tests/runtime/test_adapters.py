"""The adapter seam: a third SDK's adapter needs its own code and one registration line, no runtime edit.

The "SDK" here is a toy defined in this file (its agents hold a script of replies and plain
functions as tools). Its adapter implements ``FrameworkAdapter`` and builds an ``hx.Agent`` subclass
that asks its model its own way (``request``) and says which of its errors are worth asking again
(``is_retryable``); registered with one ``register(...)`` line, ``hx.Runtime`` runs its agents:
tools with the policies the adapter gave them, instructions, retries, the ledger's transcript.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

import helix_dbos as hx
from helix_dbos import adapters
from helix_dbos.adapters.base import AgentSeam, DepsFactory, FrameworkAdapter, StreamingSeam, ToolPolicies
from helix_dbos.definitions.context import RunScope
from helix_dbos.errors import ConfigurationError
from tests.conftest import one_database

ROOT = Path(__file__).resolve().parents[2]


# --- the toy SDK: nothing of helix in it ---------------------------------------------------------


class ToyBusy(Exception):
    """The toy SDK's "provider overloaded" error: worth asking again, as only its adapter knows."""


@dataclass
class ToyAgent:
    """A toy SDK's agent: replies played in order (tool calls as ``(tool, args)`` pairs, or a final
    text), plain functions as tools, a ``safe`` set naming the tools its users declared safe."""

    label: str
    prompt: str
    script: list[list[tuple[str, dict[str, Any]]] | str]
    functions: list[Callable[..., Any]] = field(default_factory=list)
    safe: set[str] = field(default_factory=set)
    busy_first: int = 0  # the first n requests fail ToyBusy


# --- its adapter: what a third SDK's subpackage would hold ---------------------------------------


@dataclass
class ToyDefinition(hx.Agent):
    """The adapter's definition: the runtime's hooks over a ``ToyAgent``."""

    source: ToyAgent | None = None
    asked: list[tuple[int, str | None]] = field(default_factory=list)

    async def request(self, messages: list[ModelMessage], instructions: str | None, scope: RunScope) -> ModelResponse:
        assert self.source is not None
        n = sum(isinstance(m, ModelResponse) for m in messages)
        self.asked.append((n, instructions))
        if len(self.asked) <= self.source.busy_first:
            raise ToyBusy("overloaded")
        step = self.source.script[min(n, len(self.source.script) - 1)]
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)], model_name="toy")
        return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=f"toy-{n}-{i}") for i, (tool, args) in enumerate(step)], model_name="toy")

    async def instructions_for(self, scope: RunScope) -> str | None:
        assert self.source is not None
        return f"{self.source.prompt} (step {scope.step})"

    def is_retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, ToyBusy)


class ToyAdapter:
    name = "toy"

    def accepts(self, obj: object) -> bool:
        return isinstance(obj, ToyAgent)

    def name_of(self, obj: object) -> str:
        assert isinstance(obj, ToyAgent)
        return obj.label

    def build(self, obj: object, *, name: str, tool_policies: ToolPolicies | None, deps_factory: DepsFactory | None) -> hx.Agent:
        assert isinstance(obj, ToyAgent)
        tools = []
        for fn in obj.functions:
            replay = "safe" if fn.__name__ in obj.safe else "unsafe"  # the SDK's own declaration
            replay = (tool_policies or {}).get(fn.__name__, {}).get("replay", replay)  # the runtime's mapping wins
            tools.append(hx.tool(replay=replay)(fn))
        return ToyDefinition(name=name, model="toy", tools=tools, source=obj,
                             model_retries=hx.ModelRetries(attempts=3, first_delay=0.05, jitter=0.0))


# --- the tests -----------------------------------------------------------------------------------


@pytest.fixture
def toy() -> Any:
    adapter = adapters.register(ToyAdapter())  # the one line a third SDK needs
    yield adapter
    adapters.unregister("toy")


SHIPPED: list[str] = []


def ship(order: str) -> str:
    """Ship an order."""
    SHIPPED.append(order)
    return f"shipped {order}"


def quote(order: str) -> int:
    """Price an order."""
    return len(order)


def test_a_third_sdk_runs_through_the_runtime_with_one_registration_line(toy: Any, make_runtime: Any) -> None:
    SHIPPED.clear()
    agent = ToyAgent("toy-shop", "You run a shop.", [[("quote", {"order": "abc"}), ("ship", {"order": "abc"})], "done: abc"],
                     functions=[ship, quote], safe={"quote", "ship"})
    rt = make_runtime([agent], tool_policies={"toy-shop": {"ship": {"replay": "unsafe"}}})  # the mapping wins
    definition = rt.agents["toy-shop"]
    assert isinstance(definition, ToyDefinition)
    result = rt.start("toy-shop", "buy abc").result(timeout=60)
    assert result.status == "completed" and result.output == "done: abc"
    assert SHIPPED == ["abc"]
    calls = {c.tool_name: c for c in rt.session(result.session_id).calls}
    assert calls["quote"].status == "ok" and calls["ship"].status == "ok"
    assert calls["quote"].replay == "safe" and calls["ship"].replay == "unsafe"
    # the second request saw the ledger's transcript (the tools' returns) and fresh instructions
    assert [n for n, _ in definition.asked] == [0, 1]
    assert definition.asked[1][1] == "You run a shop. (step 1)"


@one_database  # the retry budget lives inside one model step
def test_the_agents_own_errors_decide_its_retries(toy: Any, make_runtime: Any) -> None:
    """``is_retryable`` is the adapter's: ToyBusy is no pydantic-ai error, and is asked again."""
    busy = ToyAgent("toy-busy", "Be brief.", ["ok"], busy_first=2)
    down = ToyAgent("toy-down", "Be brief.", ["ok"], busy_first=5)
    rt = make_runtime([busy, down])
    result = rt.start("toy-busy", "hi").result(timeout=60)
    assert result.status == "completed" and result.output == "ok"
    assert len(rt.agents["toy-busy"].asked) == 3  # two ToyBusy, then the reply
    failed = rt.start("toy-down", "hi").result(timeout=60)
    assert failed.status == "failed" and "overloaded" in (failed.error or "")
    assert len(rt.agents["toy-down"].asked) == 3  # the budget (ModelRetries(attempts=3)), no more


def test_an_agent_overriding_request_alone_streams_through_it(toy: Any, make_runtime: Any) -> None:
    """With live output on, an adapter that did not write ``stream`` is asked through ``request``."""
    rt = make_runtime([ToyAgent("toy-live", "Be brief.", ["streamed?"])], live_output=True)
    assert rt.start("toy-live", "hi").result(timeout=60).output == "streamed?"


def test_the_transcript_holds_the_adapters_reply_as_pydantic_ai_messages(toy: Any, make_runtime: Any) -> None:
    rt = make_runtime([ToyAgent("toy-echo", "Echo.", [[("quote", {"order": "xy"})], "2"], functions=[quote], safe={"quote"})])
    result = rt.start("toy-echo", "price xy").result(timeout=60)
    messages = rt.session(result.session_id).messages
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [r.content for r in returns] == [2]


def test_an_unknown_agent_is_refused_naming_the_registered_sdks(toy: Any) -> None:
    with pytest.raises(ConfigurationError) as err:
        adapters.adapt([object()], None, None)
    assert "pydantic_ai" in str(err.value) and "toy" in str(err.value)


def test_registration_refuses_a_non_adapter_and_a_taken_name(toy: Any) -> None:
    with pytest.raises(ConfigurationError):
        adapters.register(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        adapters.register(ToyAdapter())  # another "toy"
    assert adapters.register(toy) is toy  # the same adapter again is no change


def test_the_protocols_hold_for_the_built_in_and_the_toy() -> None:
    assert isinstance(ToyAdapter(), FrameworkAdapter)
    assert all(isinstance(a, FrameworkAdapter) for a in adapters.registered())
    plain = hx.Agent(name="plain", model="test")
    assert isinstance(plain, AgentSeam) and isinstance(plain, StreamingSeam)
    assert isinstance(ToyDefinition(name="t", model="toy"), AgentSeam)


def test_each_built_in_adapter_is_its_subpackage_and_one_registration_line() -> None:
    """What "Building an adapter" (docs/architecture.md) promises: a subpackage of
    helix_dbos/adapters and exactly one ``register(<subpackage>.ADAPTER)`` line in its __init__."""
    base = ROOT / "helix_dbos" / "adapters"
    subpackages = sorted(p.name for p in base.iterdir() if (p / "__init__.py").exists())
    tree = ast.parse((base / "__init__.py").read_text())
    registered = sorted(
        node.value.args[0].value.id
        for node in tree.body
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "register"
        and isinstance(node.value.args[0], ast.Attribute) and node.value.args[0].attr == "ADAPTER" and isinstance(node.value.args[0].value, ast.Name)
    )
    assert subpackages and registered == subpackages
    built_in = {__import__(f"helix_dbos.adapters.{s}", fromlist=["ADAPTER"]).ADAPTER.name for s in subpackages}
    assert built_in <= {a.name for a in adapters.registered()}


def test_an_agent_asking_its_model_its_own_way_is_no_local_sub_agent() -> None:
    """A local child is pydantic-ai's own loop over a pydantic-ai model; an adapter's agent with its
    own ``request`` has none, so it is refused at definition, not in the parent's run."""
    from helix_dbos.errors import UnsupportedFeatureError

    toy = ToyDefinition(name="toy-child", model="toy")
    with pytest.raises(UnsupportedFeatureError, match="remote or companion"):
        hx.local_agent(toy)
    assert hx.remote_agent(toy).mode == "remote"


def test_the_service_checks_an_adapters_model_through_the_seam() -> None:
    """The service builds every agent's model before it takes a request (``check_model``): an
    agent asking its model its own way is not resolved as a pydantic-ai model name."""
    from helix_dbos.service.providers import check_models

    check_models({"toy": ToyDefinition(name="toy", model="toy")})
    with pytest.raises(ConfigurationError, match="cannot use model 'toy'"):
        check_models({"plain": hx.Agent(name="plain", model="toy")})
