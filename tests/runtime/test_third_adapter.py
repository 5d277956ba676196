"""A third adapter written by following docs/architecture.md "Building an adapter" step by step.

The "SDK" is a toy with no helix in it and no pydantic-ai: a ``Parrot`` agent decides its next move
from a plain history of dicts, and its ``Action``s are plain functions marked ``idempotent`` or not.
Its adapter (the section below the SDK) is what the guide asks for and nothing more: a
``FrameworkAdapter`` (``name``, ``accepts``, ``name_of``, ``build``) and an ``hx.Agent`` subclass
overriding ``request`` (the ledger's pydantic-ai messages converted at its edge) and
``instructions_for``. Registered with one ``register(...)`` line, it runs under ``hx.Runtime`` on
both databases with a safe and an unsafe tool, the safe one's policy from the SDK's own
declaration, the unsafe one's the default, and the runtime's ``tool_policies`` on top.

Files touched to add it: this module (the adapter's code; in the helix tree it would be
``helix_dbos/adapters/parrot/__init__.py``) and one registration line; no runtime edit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

import helix_dbos as hx
from helix_dbos import adapters
from helix_dbos.adapters.base import DepsFactory, ToolPolicies
from helix_dbos.definitions.context import RunScope
from helix_dbos.errors import ConfigurationError

# --- the toy SDK ----------------------------------------------------------------------------------


@dataclass
class Action:
    """A Parrot tool: a function, and whether its author says it may run twice."""

    fn: Callable[..., Any]
    idempotent: bool = False


@dataclass
class Parrot:
    """A Parrot agent: ``decide(history)`` returns ``{"say": text}`` or ``{"do": [(action, args), ...]}``;
    ``history`` is a list of ``{"role": "user" | "parrot" | "action", ...}`` dicts."""

    title: str
    motto: str
    decide: Callable[[list[dict[str, Any]]], dict[str, Any]]
    actions: list[Action] = field(default_factory=list)


# --- its adapter: what the guide asks for ----------------------------------------------------------


def _history(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The ledger's transcript (pydantic-ai messages, the shape every adapter is handed) in Parrot's words."""
    out: list[dict[str, Any]] = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, UserPromptPart):
                out.append({"role": "user", "text": p.content})
            elif isinstance(p, ToolReturnPart):
                out.append({"role": "action", "name": p.tool_name, "result": p.content})
            elif isinstance(p, TextPart):
                out.append({"role": "parrot", "text": p.content})
            elif isinstance(p, ToolCallPart):
                out.append({"role": "parrot", "do": p.tool_name, "args": p.args_as_dict()})
    return out


@dataclass
class ParrotAgent(hx.Agent):
    """A Parrot agent as the runtime runs it; ``model`` is a label only (``request`` is overridden,
    so the base class never builds a pydantic-ai model from it)."""

    source: Parrot | None = None
    seen: list[list[dict[str, Any]]] = field(default_factory=list)

    async def instructions_for(self, scope: RunScope) -> str | None:
        assert self.source is not None
        return self.source.motto

    async def request(self, messages: list[ModelMessage], instructions: str | None, scope: RunScope) -> ModelResponse:
        assert self.source is not None
        history = _history(messages)
        self.seen.append(history)
        move = self.source.decide(history)
        if "say" in move:
            return ModelResponse(parts=[TextPart(move["say"])], model_name="parrot")
        n = len([m for m in messages if isinstance(m, ModelResponse)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"parrot-{n}-{i}") for i, (name, args) in enumerate(move["do"])],
                             model_name="parrot")


class ParrotAdapter:
    """``FrameworkAdapter`` for Parrot agents (``isinstance`` is enough: the toy SDK is this module)."""

    name = "parrot"

    def accepts(self, obj: object) -> bool:
        return isinstance(obj, Parrot)

    def name_of(self, obj: object) -> str:
        assert isinstance(obj, Parrot)
        return obj.title

    def build(self, obj: object, *, name: str, tool_policies: ToolPolicies | None, deps_factory: DepsFactory | None) -> hx.Agent:
        assert isinstance(obj, Parrot)
        mapping = dict(tool_policies or {})
        unknown = set(mapping) - {a.fn.__name__ for a in obj.actions}
        if unknown:  # refused here, never found in a run
            raise ConfigurationError(f"agent {name!r}: tool_policies name tools it does not have: {sorted(unknown)}")
        tools = []
        for action in obj.actions:
            policy: dict[str, Any] = {"replay": "safe" if action.idempotent else "unsafe"}  # the SDK's own declaration
            policy.update(mapping.get(action.fn.__name__, {}))  # the runtime's mapping wins; the adapter applies it
            tools.append(hx.tool(**policy)(action.fn))
        return ParrotAgent(name=name, model="parrot", tools=tools, source=obj)


# --- the tests --------------------------------------------------------------------------------------


@pytest.fixture
def parrot() -> Iterator[Any]:
    adapter = adapters.register(ParrotAdapter())  # the one registration line
    yield adapter
    adapters.unregister("parrot")


BODIES: list[tuple[str, str]] = []


def peek(cage: str) -> str:
    """Look into a cage (a read)."""
    BODIES.append(("peek", cage))
    return f"{cage}: one parrot"


def feed(cage: str, grams: int) -> dict[str, Any]:
    """Feed the parrot in a cage (an effect)."""
    BODIES.append(("feed", cage))
    return {"fed": cage, "grams": grams}


def keeper(history: list[dict[str, Any]]) -> dict[str, Any]:
    done = [h for h in history if h["role"] == "action"]
    if not done:
        return {"do": [("peek", {"cage": "c1"}), ("feed", {"cage": "c1", "grams": 20})]}
    return {"say": "; ".join(f"{h['name']}={h['result']}" for h in done)}


def test_a_third_adapter_from_the_guide_runs_a_safe_and_an_unsafe_tool(parrot: Any, make_runtime: Any) -> None:
    BODIES.clear()
    bird = Parrot("keeper", "You keep parrots.", keeper, [Action(peek, idempotent=True), Action(feed)])
    rt = make_runtime([bird])
    definition = rt.agents["keeper"]
    assert isinstance(definition, ParrotAgent) and {t.name: t.replay for t in definition.tools} == {"peek": "safe", "feed": "unsafe"}
    result = rt.start("keeper", "check cage c1").result(timeout=60)
    assert result.status == "completed", result
    assert result.output == "peek=c1: one parrot; feed={'fed': 'c1', 'grams': 20}"
    assert sorted(BODIES) == [("feed", "c1"), ("peek", "c1")]
    calls = {c.tool_name: c for c in rt.session(result.session_id).calls}
    assert (calls["peek"].replay, calls["peek"].status, calls["feed"].replay, calls["feed"].status) == ("safe", "ok", "unsafe", "ok")
    assert calls["peek"].dispatch_id and calls["feed"].dispatch_id and calls["peek"].dispatch_id != calls["feed"].dispatch_id
    # the second request saw the ledger's transcript, in Parrot's words
    assert [h["role"] for h in definition.seen[1]] == ["user", "parrot", "parrot", "action", "action"]


def test_the_runtimes_mapping_wins_and_a_wrong_one_is_refused_at_build(parrot: Any, make_runtime: Any) -> None:
    bird = Parrot("keeper2", "You keep parrots.", keeper, [Action(peek, idempotent=True), Action(feed)])
    rt = make_runtime([bird], tool_policies={"keeper2": {"peek": {"replay": "unsafe"}, "feed": {"concurrency_group": "food"}}})
    tools = {t.name: t for t in rt.agents["keeper2"].tools}
    assert (tools["peek"].replay, tools["feed"].replay, tools["feed"].concurrency_group) == ("unsafe", "unsafe", "food")
    with pytest.raises(ConfigurationError, match="water"):
        hx.Runtime([Parrot("keeper3", "", keeper, [Action(feed)])], database_url="sqlite:///unused.sqlite",
                   tool_policies={"keeper3": {"water": {"replay": "safe"}}})


def test_the_adapter_took_one_registration_line(parrot: Any) -> None:
    assert [a.name for a in adapters.registered()][-1] == "parrot"
    assert isinstance(adapters.adapt_one(Parrot("p", "", keeper), None, None), ParrotAgent)
