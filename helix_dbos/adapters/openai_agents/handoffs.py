"""Handoffs: an SDK agent's ``handoffs=`` read into calls the ledger records, and the agent that
answers a run worked out from what the ledger recorded.

The SDK's runner keeps "the current agent" in memory and switches it when the model calls a
``transfer_to_<agent>`` tool. Here that memory would die with the process, so the switch is a call
like any other: the handoff tool is offered to the model, the reply that calls it is saved first,
its body (the handoff's own ``on_invoke_handoff``: the input checked, ``on_handoff`` called) runs
between its attempt gate and its result write, and its answer, ``{"assistant": "<agent>"}`` (what
the SDK tells the model), is committed with the step. The agent that answers is then a pure
function of the transcript (``current``): the entry agent, switched by each handoff answered ``ok``
since the last user message. So a relaunch, a wake, ``resume`` or ``retry`` continue with the agent
handed to, without asking the model again; a new user message starts with the agent the runtime was
given, as ``Runner.run(agent, input)`` starts with the agent it is passed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...definitions.context import ToolContext
from ...definitions.tools import DEFAULT_RECONCILE_TIMEOUT, Tool
from ...errors import ConfigurationError, UnsupportedFeatureError
from . import policy as policies
from .tools import AnyArgs, Checked, _not_an_object

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage


@dataclass(frozen=True)
class HandoffTool(Tool):
    """One ``agents.Handoff`` as a tool: its body switches nothing by itself; its ``ok`` answer, in
    the transcript, is what makes ``target`` the agent that answers (``current``)."""

    handoff: Any = None  # agents.Handoff
    target: str = ""  # the name of the agent handed to
    owner: Any = None  # the OpenAIAgentsAgent whose run this is
    policy_source: str = "default"

    def definition(self) -> Any:
        from pydantic_ai.tools import ToolDefinition

        return ToolDefinition(name=self.name, description=self.description, parameters_json_schema=self.handoff.input_json_schema,
                              strict=self.handoff.strict_json_schema)

    def validate(self, args: Any) -> Any:
        raw: Any = json.loads(args or "{}") if isinstance(args, str) else (args if args is not None else {})
        if not isinstance(raw, dict):
            raise _not_an_object(raw)
        return Checked(dict(raw))

    async def invoke(self, args: Any, ctx: ToolContext) -> Any:
        return await self.owner.call_handoff(self, args.raw, ctx)


def answer(target: str) -> dict[str, str]:
    """What a handoff call answers (the SDK's ``get_transfer_message``), and what ``current`` reads."""
    return {"assistant": target}


def target_of(item: Any, where: str) -> Any:
    """The ``agents.Agent`` a ``handoffs=`` entry hands to, known without running anything."""
    from agents import Agent, Handoff

    if isinstance(item, Agent):
        return item
    if isinstance(item, Handoff):
        ref = getattr(item, "_agent_ref", None)
        target = ref() if ref is not None else None
        if not isinstance(target, Agent):
            raise UnsupportedFeatureError(f"{where}: handoff {item.tool_name!r} was not built by agents.handoff(agent, ...): "
                                          "the agent it hands to cannot be known before its body runs; build it with agents.handoff()")
        return target
    raise UnsupportedFeatureError(f"{where}: a handoffs= entry must be an agents.Agent or an agents.handoff(...), not {type(item).__name__}")


def refuse_handoff_features(item: Any, where: str) -> None:
    """A handoff setting the adapter would otherwise drop is refused with the reason."""
    from agents import Handoff

    if not isinstance(item, Handoff):
        return
    if item.input_filter is not None:
        raise UnsupportedFeatureError(
            f"{where}: handoff {item.tool_name!r} has an input_filter: it rewrites the history the next agent is sent, but here every "
            "request is sent the session's transcript as the ledger recorded it (what recovery replays); filter inside the "
            "target agent's instructions instead", detail={"feature": "handoff.input_filter"})
    if item.nest_handoff_history:
        raise UnsupportedFeatureError(f"{where}: handoff {item.tool_name!r}: nest_handoff_history rewrites the transcript into a "
                                      "summary the ledger does not keep", detail={"feature": "handoff.nest_handoff_history"})


def _has_callback(item: Any) -> bool:
    """Whether the handoff's body calls app code (``on_handoff``): then it may have an effect."""
    from agents import Handoff

    if not isinstance(item, Handoff):
        return False
    seen: set[int] = set()
    stack: list[Any] = [item.on_invoke_handoff]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for inner in (getattr(fn, "func", None), *(getattr(fn, "args", None) or ())):
            if callable(inner):
                stack.append(inner)
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
        for name, cell in zip(getattr(code, "co_freevars", ()), cells, strict=False):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if name == "on_handoff":
                return value is not None
            if callable(value) and getattr(value, "__module__", "").startswith("agents"):
                stack.append(value)
    return True  # not the SDK's own handoff(): its body is app code


def read_handoff(item: Any, owner: Any, where: str, override: dict[str, Any] | None) -> HandoffTool:
    """One ``handoffs=`` entry as a ``HandoffTool``. Its policy: ``safe`` when its body is only the
    SDK's (checking the input and naming the agent: running it again changes nothing), ``unsafe``
    when it calls an ``on_handoff`` (app code, which may have an effect), then ``hx.openai_policy``
    on the ``Handoff`` and the runtime's mapping by tool name, as for a function tool."""
    from agents import Agent, handoff

    refuse_handoff_features(item, where)
    target = target_of(item, where)
    made = handoff(item) if isinstance(item, Agent) else item
    found: dict[str, Any] = {"replay": "unsafe" if _has_callback(made) else "safe", "concurrency_group": None, "sequential": False,
                             "requires_approval": False, "reconcile": None, "reconcile_timeout": DEFAULT_RECONCILE_TIMEOUT}
    source = "default"
    for layer, label in ((policies.declared(made), "declared"), (policies.checked_mapping(override, made.tool_name), "mapping")):
        if layer:
            found.update(layer)
            source = label
    if found.get("reconcile") is not None and found["replay"] == "safe":
        raise ConfigurationError(f"{where}: handoff {made.tool_name!r}: a reconcile check is for an unsafe body")
    return HandoffTool(
        name=made.tool_name, description=made.tool_description or "", input_model=AnyArgs, execute=_never,
        replay=found["replay"], concurrency_group=found["concurrency_group"], sequential=bool(found["sequential"]),
        requires_approval=bool(found["requires_approval"]), reconcile=found["reconcile"],
        reconcile_timeout=float(found["reconcile_timeout"]), handoff=made, target=target.name, owner=owner, policy_source=source,
    )


def graph(entry: Any, name: str) -> dict[str, Any]:
    """Every SDK agent a run of ``entry`` can be handed to, by name (``entry`` under ``name``);
    two different agents under one name are refused: the transcript names the agent handed to."""
    from agents import Agent

    found: dict[str, Any] = {name: entry}
    stack = [entry]
    while stack:
        agent = stack.pop()
        for item in agent.handoffs:
            target = target_of(item, f"agent {agent.name!r}")
            if not isinstance(target, Agent):  # pragma: no cover - target_of refuses it
                continue
            other = found.get(target.name)
            if other is None:
                found[target.name] = target
                stack.append(target)
            elif other is not target:
                raise ConfigurationError(f"agent {name!r}: two different agents named {target.name!r} can be handed to")
    return found


def current(messages: list[ModelMessage], entry: str, handoffs: dict[str, dict[str, str]]) -> str:
    """The agent answering now: ``entry``, switched by every handoff call answered ``ok`` since the
    last user message (``handoffs``: agent -> {handoff tool -> agent handed to}). A handoff that
    failed, was denied or is in doubt (``outcome_unknown``) switched nothing: its answer says so."""
    from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

    start = 0
    for i, message in enumerate(messages):
        if isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts):
            start = i
    agent = entry
    for message in messages[start:]:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if not isinstance(part, ToolReturnPart):
                continue
            target = handoffs.get(agent, {}).get(part.tool_name)
            if target is not None and part.content == answer(target):
                agent = target
    return agent


def _never(*_: Any, **__: Any) -> Any:  # pragma: no cover - HandoffTool.invoke never calls execute
    raise AssertionError("a handoff runs through its on_invoke_handoff")
