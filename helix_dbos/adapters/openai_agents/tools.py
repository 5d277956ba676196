"""An OpenAI Agents SDK ``FunctionTool`` as an ``hx.Tool``: the SDK's own ``on_invoke_tool`` is the body.

Two things the SDK does by default would break the recovery contract, so the body is called
differently from the SDK's ``Runner``:

* errors: a ``@function_tool`` turns every exception (invalid arguments included) into the string
  "An error occurred while running the tool. Please try again.", which would be recorded as an
  ``ok`` answer. The body is a copy of the tool with that formatter off, so a failure raises and is
  recorded as the call's error (the app's own ``failure_error_function`` is bypassed too);
* timeouts: ``timeout_seconds`` would answer a late body with a string as well; the adapter bounds
  the body itself (the tool's ``timeout_seconds``, else the agent's ``tool_timeout``) and answers
  ``ToolTimeoutError``.

Arguments are validated when the reply is planned (and again at recovery) with the parameters model
the SDK builds from the function (``agents.function_schema``), so a malformed call gets a retry
prompt and never starts a body. A hand-built ``FunctionTool`` has no function to read: its
arguments must be a JSON object, and its own ``on_invoke_tool`` validates the rest.

An MCP server's tool is a ``FunctionTool`` the SDK builds when it lists the server (its body the
SDK's ``invoke_mcp_tool``): read like any other, its arguments validated by the server, its replay
policy from its annotations (``adapters/mcp_tools.py``), and a failure of its server (wrapped by the
SDK in its own exception) told to the model as the typed ``ToolServerError``.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from ...definitions.context import ToolContext
from ...definitions.tools import DEFAULT_RECONCILE_TIMEOUT, Tool
from ...errors import ConfigurationError, HelixError, ToolTimeoutError, UnsupportedFeatureError
from ..mcp_tools import replay_from_annotations
from . import policy as policies

#: Without ``timeout_seconds`` on the tool or ``tool_timeout`` on the adapter, a body waits at most this.
DEFAULT_TOOL_TIMEOUT = 120.0


class AnyArgs(pydantic.BaseModel):
    """Placeholder input model: an SDK tool validates with its own parameters model."""

    model_config = pydantic.ConfigDict(extra="allow")


class Checked:
    """Arguments the tool's parameters model accepted, kept as the model sent them (what the ledger stores)."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    def model_dump(self, mode: str = "json") -> dict[str, Any]:
        return self.raw


def _not_an_object(raw: Any) -> pydantic.ValidationError:
    return pydantic.ValidationError.from_exception_data(
        "arguments", [{"type": "dict_type", "loc": (), "input": raw}]
    )


def params_model(tool: Any) -> type[pydantic.BaseModel] | None:
    """The parameters model the SDK validates a ``@function_tool``'s arguments with, rebuilt from
    the function it wraps; ``None`` for a tool built by hand."""
    fn = getattr(tool, "__wrapped__", None)
    if not callable(fn):
        return None
    from agents.function_schema import function_schema

    try:
        return function_schema(fn, use_docstring_info=False).params_pydantic_model
    except Exception:  # noqa: BLE001 the SDK could wrap it, but not describe it again: its own body validates
        return None


def refuse_tool_features(tool: Any, agent: str) -> None:
    """A tool setting the adapter would otherwise drop is refused with the reason."""
    name = getattr(tool, "name", "?")
    where = f"agent {agent!r}: tool {name!r}"
    if getattr(tool, "_is_agent_tool", False):
        raise UnsupportedFeatureError(f"{where} is an agent.as_tool(): it is read as a remote sub-agent by the agent that offers it "
                                      "(agent_tools.py), never run as one body")
    if getattr(tool, "_is_codex_tool", False):
        raise UnsupportedFeatureError(f"{where} is a Codex tool: its session runs outside the ledger")
    if tool.tool_input_guardrails or tool.tool_output_guardrails:
        raise UnsupportedFeatureError(f"{where}: tool guardrails run around the body in the SDK's runner, not here; check inside the body")
    if tool.defer_loading:
        raise UnsupportedFeatureError(f"{where}: defer_loading (Responses tool search) is not offered: every tool is offered to the model")
    if tool.allowed_callers:
        raise UnsupportedFeatureError(f"{where}: allowed_callers (programmatic tool calling) runs tools inside the model request, where no ledger row gates them")
    if tool.custom_data_extractor is not None:
        raise UnsupportedFeatureError(f"{where}: custom_data_extractor attaches data to the SDK's run items, which are not kept here")


@dataclass(frozen=True)
class SdkTool(Tool):
    """An SDK ``FunctionTool`` read into a tool; ``listed`` is the SDK's tool as the agent lists it."""

    listed: Any = None  # agents.FunctionTool, as the app built it
    quiet: Any = None  # a copy of it with the SDK's failure formatter off: the body
    owner: Any = None  # the OpenAIAgentsAgent
    params: type[pydantic.BaseModel] | None = None
    #: ``needs_approval`` as an async ``(ctx, params, call_id) -> bool``: asked when the reply is planned
    approval_rule: Any = None
    timeout: float = DEFAULT_TOOL_TIMEOUT
    policy_source: str = "default"

    def definition(self) -> Any:
        from pydantic_ai.tools import ToolDefinition

        return ToolDefinition(name=self.name, description=self.description, parameters_json_schema=self.listed.params_json_schema,
                              strict=self.listed.strict_json_schema)

    def validate(self, args: Any) -> Any:
        raw: Any = json.loads(args or "{}") if isinstance(args, str) else (args if args is not None else {})
        if not isinstance(raw, dict):
            raise _not_an_object(raw)
        if self.params is not None:
            self.params.model_validate(raw)
        return Checked(dict(raw))

    async def invoke(self, args: Any, ctx: ToolContext) -> Any:
        return await self.owner.call_tool(self, args.raw, ctx)

    async def run_body(self, raw: dict[str, Any], call: ToolContext, app_context: Any, source: Any) -> Any:
        """One body: ``on_invoke_tool`` of the quiet copy with the SDK's ``ToolContext``, bounded."""
        from agents.tool_context import ToolContext as SdkToolContext
        from openai.types.responses import ResponseFunctionToolCall

        arguments = json.dumps(raw, ensure_ascii=False)
        call_id = call.tool_call_id or call.dispatch_id or f"helix-{call.run_id}"
        sdk_ctx = SdkToolContext(
            context=app_context, tool_name=self.name, tool_call_id=call_id, tool_arguments=arguments,
            tool_call=ResponseFunctionToolCall(type="function_call", call_id=call_id, name=self.name, arguments=arguments),
            agent=source,
        )
        token = policies.CURRENT_CALL.set(call)
        try:
            return await asyncio.wait_for(self.quiet.on_invoke_tool(sdk_ctx, arguments), self.timeout)
        except TimeoutError:
            raise ToolTimeoutError(f"tool {self.name!r} gave no answer within {self.timeout:g} s") from None
        except Exception as exc:
            # the SDK's MCP invoker wraps what the server link raised (ToolServerError) in its own
            # AgentsException: the model is told the typed error, as for any adapter's MCP tool
            if isinstance(exc.__cause__, HelixError) and type(exc).__module__.startswith("agents"):
                raise exc.__cause__ from None
            raise
        finally:
            policies.CURRENT_CALL.reset(token)


def _quiet(tool: Any) -> Any:
    """A copy of ``tool`` whose failures raise (the SDK's formatter off); the app's tool is untouched."""
    from agents.tool import set_function_tool_failure_error_function

    quiet = copy.copy(tool)  # FunctionTool.__copy__ rebinds the failure-handling invoker to the copy
    set_function_tool_failure_error_function(quiet, None)
    return quiet


def is_mcp(tool: Any) -> bool:
    """Whether ``tool`` is one an MCP server of the agent listed (the SDK binds it to its server)."""
    return getattr(tool, "_mcp_tool_binding", None) is not None


def resolve(tool: Any, override: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The recovery policy of one SDK tool, and where it came from. Later sources win: the default
    (unsafe), the SDK's ``needs_approval`` (``True`` -> approval; a function -> asked per call; an
    MCP server's ``require_approval`` arrives as this), an MCP tool's annotations (``readOnlyHint``
    or ``idempotentHint`` true -> safe, as for every adapter's MCP tools), the tool's own
    ``openai_policy``, the runtime's mapping by tool name."""
    rule = tool.needs_approval
    found: dict[str, Any] = {"replay": "unsafe", "concurrency_group": None, "sequential": False,
                             "requires_approval": rule is True, "reconcile": None, "reconcile_timeout": DEFAULT_RECONCILE_TIMEOUT,
                             "approval_rule": rule if callable(rule) else None}
    source = "needs_approval" if rule is True or callable(rule) else "default"
    if is_mcp(tool):
        found["replay"] = replay_from_annotations(tool.mcp_annotations)
        source = "mcp_annotations"
    for layer, label in ((policies.declared(tool), "declared"), (policies.checked_mapping(override, tool.name), "mapping")):
        if layer:
            source = label
            if "requires_approval" in layer:
                found["approval_rule"] = None  # a declared flag replaces the SDK's per-call function
            found.update(layer)
    return found, source


def read_tool(tool: Any, owner: Any, agent_name: str, override: Mapping[str, Any] | None, tool_timeout: float | None) -> SdkTool:
    """One SDK tool as an ``SdkTool``; refuses what the adapter cannot honour."""
    from agents import FunctionTool

    if not isinstance(tool, FunctionTool):
        raise UnsupportedFeatureError(
            f"agent {agent_name!r}: tool {getattr(tool, 'name', None)!r} is a {type(tool).__name__}, which runs inside the model "
            "request or outside a function call, where no ledger row can gate or answer it; only FunctionTools run under helix",
            detail={"agent": agent_name, "tool_type": type(tool).__name__},
        )
    refuse_tool_features(tool, agent_name)
    found, source = resolve(tool, override)
    if found.get("transactional"):
        raise ConfigurationError(f"agent {agent_name!r}: tool {tool.name!r}: transactional tools are hx.tools")
    timeout = float(tool.timeout_seconds or tool_timeout or DEFAULT_TOOL_TIMEOUT)
    return SdkTool(
        name=tool.name,
        description=tool.description or "",
        input_model=AnyArgs,
        execute=_never,
        replay=found["replay"],
        concurrency_group=found["concurrency_group"],
        sequential=found["sequential"],
        requires_approval=bool(found["requires_approval"]),
        reconcile=found["reconcile"],
        reconcile_timeout=float(found["reconcile_timeout"]),
        listed=tool,
        quiet=_quiet(tool),
        owner=owner,
        params=None if is_mcp(tool) else params_model(tool),  # an MCP tool's arguments are its server's to validate
        approval_rule=found["approval_rule"],
        timeout=timeout,
        policy_source=source,
    )


def _never(*_: Any, **__: Any) -> Any:  # pragma: no cover - SdkTool.invoke never calls execute
    raise AssertionError("an SDK tool runs through its on_invoke_tool")
