"""``agent.as_tool(...)``: the nested agent run as a helix remote sub-agent, not as one opaque body.

The SDK's agent tool is a ``FunctionTool`` whose body runs ``Runner.run`` of the other agent: its
model requests and tool bodies would all be inside one unsafe body, with no ledger of their own, so
a crash would lose every call the nested run made. Read here, the tool is an ``hx.remote_agent`` of
that agent under the tool's own name and description: the child is a run of its own (a DBOS
workflow whose id is the call's dispatch id, on the runtime's queue), its tools keep their own
policies and recover by the same rules, and the parent's call is answered once, with the child's
output, by re-attaching to the child after a crash (docs/subagents.md).

What the nested ``Runner.run`` would have been given beside the agent (its own ``max_turns``,
``run_config``, ``hooks``, a session, an output extractor, a structured ``parameters`` input) has no
place in a child run of its own and is refused when the agent is read.
"""

from __future__ import annotations

from typing import Any

from ...errors import UnsupportedFeatureError

#: The ``as_tool`` options a helix child run cannot honour, with what each would have done; a
#: value other than its default refuses the tool.
REFUSED_OPTIONS: dict[str, str] = {
    "custom_output_extractor": "it reads the SDK's RunResult; the call's result is the child's output",
    "on_stream": "the child's events are not streamed to the parent",
    "run_config": "the child is an ordinary run of its own agent",
    "max_turns": "the child's budget is its agent's (from_openai_agents(max_steps=))",
    "hooks": "run hooks are called by the SDK's runner",
    "previous_response_id": "the child's transcript is its own session's, sent whole",
    "conversation_id": "the child's transcript is its own session's, sent whole",
    "session": "the child's session is a helix session minted for the call",
    "input_builder": "the child is sent the parent's message as it is",
    "parameters": "a helix sub-agent takes one message",
}


def _impl_options(tool: Any) -> dict[str, Any] | None:
    """The options ``as_tool`` closed over, read off its body's closure (the SDK keeps no field for
    them); ``None`` when the body is not the SDK's ``as_tool`` body as this adapter knows it."""
    seen: set[int] = set()
    stack: list[Any] = [tool.on_invoke_tool]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
        names = getattr(code, "co_freevars", ())
        values: dict[str, Any] = {}
        for name, cell in zip(names, cells, strict=False):
            try:
                values[name] = cell.cell_contents
            except ValueError:
                continue
        if getattr(fn, "__name__", "") == "_run_agent_impl":
            return values
        stack.extend(v for v in values.values() if callable(v))
        inner = getattr(fn, "_invoke_tool_impl", None)  # the SDK's failure-handling invoker wraps the body
        if callable(inner):
            stack.append(inner)
    return None


def child_of(tool: Any, where: str) -> Any:
    """The ``agents.Agent`` an agent tool runs; what the child run cannot honour is refused."""
    from agents import Agent
    from agents.agent_tool_input import AgentAsToolInput
    from agents.strict_schema import ensure_strict_json_schema
    from pydantic import TypeAdapter

    child = getattr(tool, "_agent_instance", None)
    if not isinstance(child, Agent):
        raise UnsupportedFeatureError(f"{where} is an agent tool whose agent cannot be read")
    if tool.needs_approval is not False:
        raise UnsupportedFeatureError(f"{where}: needs_approval on an agent tool: a sub-agent call is not approval-gated here; "
                                      "gate the child's own tools", detail={"feature": "as_tool.needs_approval"})
    if tool.is_enabled is not True:
        raise UnsupportedFeatureError(f"{where}: is_enabled on an agent tool: a sub-agent is offered at every step",
                                      detail={"feature": "as_tool.is_enabled"})
    options = _impl_options(tool)
    if options is None:
        raise UnsupportedFeatureError(f"{where}: its as_tool() options cannot be read from this SDK version's agent tool, so what its "
                                      "nested run would honour cannot be checked", detail={"feature": "as_tool"})
    for name, reason in REFUSED_OPTIONS.items():
        if options.get(name) is not None:
            raise UnsupportedFeatureError(f"{where}: as_tool({name}=...) is not supported: {reason}", detail={"feature": f"as_tool.{name}"})
    if tool.params_json_schema != ensure_strict_json_schema(TypeAdapter(AgentAsToolInput).json_schema()):
        raise UnsupportedFeatureError(f"{where}: as_tool(parameters=...) is not supported: a helix sub-agent takes one message",
                                      detail={"feature": "as_tool.parameters"})
    return child
