"""An OpenAI Agents SDK ``agents.Agent`` as it is, read into an ``hx.Agent``: what the read definition
does in a run (how it is read, ``from_openai_agents``, is ``reading.py``).

The SDK's ``Runner`` is not used: the run workflow keeps its own loop (the model's reply recorded
before anything acts on it, every call saved first with a dispatch id, each body between its
attempt gate and its result write). What is the SDK's runs as the SDK runs it: the agent's own
model object (``OpenAIChatCompletionsModel``, ``OpenAIResponsesModel``, any ``agents.Model``) is
asked with ``get_response`` (``stream_response`` under ``live_output``: ``streaming.py``), the agent's
function tools' own ``on_invoke_tool`` is each body, its
instructions (static or a function of the run context) are rendered per request with
``get_system_prompt``, ``is_enabled`` is honoured through ``get_all_tools``, ``needs_approval`` gates
a call, and ``output_type`` is validated by the SDK's ``AgentOutputSchema``. The agents its
``handoffs=`` reach are read into the same definition, one ``Member`` each, and the one answering a
request is read from the transcript (``handoffs.py``); an ``agent.as_tool()`` tool is a remote
sub-agent (``agent_tools.py``). What the runtime cannot honour is refused when the agent is read
(``features.py``). ``mcp_servers`` (of any member) are listed by the SDK too, through the adapter's own
connections to them (``mcp.py``), and their tools are function tools like the others.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic

from ...definitions import home
from ...definitions.agents import FINISH_TOOL, Agent, SubAgent, SubAgentInput
from ...definitions.context import RunScope, ToolContext
from ...definitions.run_deps import RunDeps
from ...definitions.tools import Tool
from ...errors import ConfigurationError
from ..base import DepsFactory
from . import guardrails, handoffs, messages, sdk_tracing
from . import policy as policies
from .handoffs import HandoffTool
from .tools import SdkTool, read_tool

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.tools import ToolDefinition

    from ...definitions.model_requests import StreamEvents

log = logging.getLogger("helix_dbos")


def _never_called(*_: Any) -> Any:  # pragma: no cover - the runtime answers these, the SDK never invokes them here
    raise AssertionError("an offered tool is answered by the runtime, not invoked by the SDK")


@dataclass
class Member:
    """One SDK agent that can answer a run: the entry agent, or one its handoffs reach. Each keeps
    its own model, settings, instructions and tools; the run's definition holds them all, so a
    saved call of any of them is judged by its tool as it is now."""

    name: str
    source: Any  # agents.Agent
    sdk_model: Any
    settings: Any  # agents.ModelSettings
    handoffs: list[HandoffTool] = field(default_factory=list)
    #: its ``as_tool`` agent tools and, for the entry agent, ``from_openai_agents(sub_agents=...)``
    sub_agents: list[SubAgent] = field(default_factory=list)
    #: the agent whose tools are listed: ``source`` itself, or (with ``mcp_servers``) a clone of it
    #: whose servers are ``mcp.LinkedServer``s, connected by the adapter wherever the step runs
    lister: Any = None

    @property
    def listing(self) -> Any:
        return self.lister if self.lister is not None else self.source

    @property
    def model_name(self) -> str:
        name = getattr(self.sdk_model, "model", None)
        return str(name) if name else type(self.sdk_model).__name__


@dataclass
class OpenAIAgentsAgent(Agent):
    """An ``hx.Agent`` read from an ``agents.Agent``; build it with ``from_openai_agents``."""

    source: Any = None
    sdk_model: Any = None
    sdk_settings: Any = None  # agents.ModelSettings
    output_schema: Any = None  # agents.AgentOutputSchema, or None for text output
    tool_policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    deps_factory: DepsFactory | None = None
    tool_timeout: float | None = None
    #: ``hx.client_tool``s offered beside the SDK's tools: the client answers them (the SDK has no such tool)
    client_tools: list[Tool] = field(default_factory=list)
    _deps: RunDeps = field(default_factory=RunDeps, init=False, repr=False)
    _scopes: dict[str, RunScope] = field(default_factory=dict, init=False, repr=False)
    #: the agent whose tools are listed: ``source`` itself, or (with ``mcp_servers``) a clone of it
    #: whose servers are ``mcp.LinkedServer``s, connected by the adapter wherever the step runs
    lister: Any = None
    _read: dict[int, tuple[Any, SdkTool]] = field(default_factory=dict, init=False, repr=False)
    #: the agents that can answer a run, by name; the entry agent (``source``) is ``members[name]``
    members: dict[str, Member] = field(default_factory=dict, repr=False)
    #: per run: the tool names the agent answering its last request was offered (``review_plan``)
    _offers: dict[str, set[str]] = field(default_factory=dict, init=False, repr=False)
    #: per run: the agent that answered its last request (whose output guardrails check its output)
    _answering: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    #: the SDK agent whose tool a tool name is (``ToolContext.agent`` of its body)
    _tool_agents: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _listed: bool = field(default=False, init=False, repr=False)

    def uses_scope(self) -> bool:
        return True

    def resolved_model(self) -> Any:
        return self.sdk_model

    @property
    def model_name(self) -> str:
        name = getattr(self.sdk_model, "model", None)
        return str(name) if name else type(self.sdk_model).__name__

    # --- the run context ------------------------------------------------------------------------

    async def deps_for(self, scope: RunScope) -> Any:
        """The run's context object (``RunContextWrapper.context``): the factory fed the stored JSON,
        once per run in this process; without a factory, the JSON itself."""
        return await self._deps.get(scope, self.deps_factory)

    async def wrapper(self, scope: RunScope) -> Any:
        from agents import RunContextWrapper

        return RunContextWrapper(context=await self.deps_for(scope))

    def _remember(self, scope: RunScope) -> None:
        if len(self._scopes) > 256:
            self._scopes.pop(next(iter(self._scopes)))
        self._scopes[scope.run_id] = scope

    # --- hooks the runtime calls ------------------------------------------------------------------

    def read_tools(self, listed: list[Any], *, keep_only: bool = False) -> list[SdkTool]:
        """The SDK's tools as ``SdkTool``s; each object is read once (its quiet copy kept) while it
        is listed (an MCP server's tools are new objects at each listing: with ``keep_only``, a whole
        listing of the run's agents, only this listing's are kept)."""
        out: list[SdkTool] = []
        read: dict[int, tuple[Any, SdkTool]] = {}
        for tool in listed:
            if getattr(tool, "_is_agent_tool", False):  # a sub-agent (agent_tools.py), offered as one
                continue
            kept = self._read.get(id(tool))
            if kept is None or kept[0] is not tool:
                kept = (tool, read_tool(tool, self, self.name, self.tool_policies.get(getattr(tool, "name", "")), self.tool_timeout))
            read[id(tool)] = kept
            out.append(kept[1])
        if keep_only:  # an MCP server's tools are new objects at each listing: only this one's are kept
            self._read = read
        else:
            self._read.update(read)
            if len(self._read) > 4096:
                self._read = read
        names = ([t.name for t in out] + [c.name for c in self.client_tools] + [s.tool_name for s in self.sub_agents]
                 + [h.name for h in self.handoff_tools()])
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigurationError(f"agent {self.name!r}: duplicate tool names {dupes}")
        if FINISH_TOOL in names:
            raise ConfigurationError(f"agent {self.name!r}: {FINISH_TOOL!r} is reserved for structured output")
        return out

    async def refresh(self, scope: RunScope) -> None:
        """The agent's tools for this run, as ``get_all_tools`` lists them (``is_enabled`` asked with
        the run's context, each MCP server listed through the adapter's connection to it); a listing
        that fails keeps the last good one, and so does each MCP server (``mcp.LinkedServer``)."""
        self._remember(scope)
        rcw = await self.wrapper(scope)
        listed: list[Any] = []
        try:
            listed = await self._list_all(rcw, scope.session_id)
        except ConfigurationError:
            raise
        except Exception as exc:  # noqa: BLE001 keep the last good listing; say why in the log
            log.warning("agent %r: its tools could not be listed: %s", self.name, exc)
            return
        self.tools = [*self.read_tools(listed, keep_only=True), *self.client_tools, *self.handoff_tools()]
        self._listed = True

    async def _list_all(self, rcw: Any, session_id: str | None) -> list[Any]:
        """Every member's tools as ``get_all_tools`` lists them (MCP servers through the adapter's
        links), each tool object once; two different tools under one name are refused."""
        listed: list[Any] = []
        for member in self._members():
            asked = member.listing.get_all_tools(rcw)
            found = await (home.at_home(session_id, asked) if session_id is not None else asked)
            for tool in found:
                if self._tool_agents.setdefault(getattr(tool, "name", ""), member.source) is not member.source:
                    if not any(t is tool for t in listed):  # one tool object shared by two agents is one tool
                        raise ConfigurationError(f"agent {self.name!r}: two different tools named {tool.name!r} in the agents it can hand off to")
                    continue
                if not any(t is tool for t in listed):
                    listed.append(tool)
        return listed

    async def catalog(self) -> tuple[list[Tool], list[dict[str, str]]]:
        """Every tool with its policy, and the MCP servers that could not list theirs (with why).

        A run's listing, when this process has one, is the one shown; else the agents are listed now
        with a context of no run (``context`` is ``None``: an ``is_enabled`` that needs a run's
        context shows the agent's tools unlisted, with why). An MCP server is connected once and
        kept, so a read does not start it again; one that failed is asked again at the next read."""
        from .mcp import LinkedServer

        members = self._members()
        if all(m.listing is m.source for m in members):  # no MCP server: the tools as read are the catalog
            return list(self.tools), []
        unlisted: list[dict[str, str]] = []
        if not self._listed:
            from agents import RunContextWrapper

            try:
                tools = [*self.read_tools(await self._list_all(RunContextWrapper(context=None), None), keep_only=True),
                         *self.client_tools, *self.handoff_tools()]
            except Exception as exc:  # noqa: BLE001 shown to the operator as "could not be listed", with why
                return list(self.tools), [{"toolset": f"agent {self.name!r}", "error": f"{type(exc).__name__}: {exc}"}]
            if not self._listed:  # a run listed meanwhile: its listing is the one kept
                self.tools = tools
        for member in members:
            for server in member.listing.mcp_servers:
                if isinstance(server, LinkedServer) and server.listed is None and server.error is not None:
                    unlisted.append({"toolset": server.name, "error": server.error})
        return list(self.tools), unlisted

    def handoff_tools(self) -> list[HandoffTool]:
        """Every handoff of every agent the run can be handed to, once each."""
        out: list[HandoffTool] = []
        for member in self.members.values():
            out.extend(h for h in member.handoffs if not any(h is o for o in out))
        return out

    async def instructions_for(self, scope: RunScope) -> str | None:
        """``instructions`` as the SDK renders them: a string, or the function called with the run's
        context and the agent, for every request (a recovered run renders them again)."""
        rcw = await self.wrapper(scope)
        return await home.at_home(scope.session_id, self.source.get_system_prompt(rcw))

    async def review_plan(self, planned: list[dict[str, Any]], scope: RunScope) -> list[dict[str, Any]]:
        """A tool's ``needs_approval`` function, asked per call with the run's context, the arguments
        and the call id, inside the model step (recorded with the reply); one that raises asks a human."""
        planned = self._offered_only(planned, scope)
        gated = [p for p in planned if p.get("kind") == "tool" and p.get("status") == "saved"
                 and isinstance(self.tool(p["tool_name"]), SdkTool) and self._rule(p["tool_name"]) is not None]
        if not gated:
            return planned
        rcw = await self.wrapper(scope)
        out: list[dict[str, Any]] = []
        for p in planned:
            rule = self._rule(p["tool_name"]) if p in gated else None
            if rule is not None:
                try:
                    needs = bool(await home.at_home(scope.session_id, rule(rcw, dict(p["args"]), p["tool_call_id"])))
                except Exception:  # a broken rule asks a human: the safe side (logged with its traceback)
                    log.warning("approval rule of tool %r raised; asking a human instead", p["tool_name"], exc_info=True)
                    needs = True
                if needs:
                    p = {**p, "requires_approval": True, "status": "pending"}
            out.append(p)
        return out

    async def check_input(self, messages_: list[ModelMessage], scope: RunScope) -> list[dict[str, Any]]:
        """The agent's ``input_guardrails`` on the run's new input (``guardrails.new_input``: the
        user message the transcript ends with), before the step's model request; none at a later
        step of the run (its input was checked by its first)."""
        listed = list(self.source.input_guardrails or [])
        given = guardrails.new_input(messages_) if listed else None
        if given is None:
            return []
        rcw = await self.wrapper(scope)
        return await guardrails.run_all("input", listed, lambda g: g.run(self.source, given, rcw), scope, self.name)

    async def check_output(self, output: Any, scope: RunScope) -> list[dict[str, Any]]:
        """The ``output_guardrails`` of the agent that gave the run's final output (after a handoff,
        the agent handed to, as the SDK's runner runs the last agent's), on the output as the SDK
        hands it: the text, or the ``output_type`` value (validated again from the stored JSON)."""
        member = self.members.get(self._answering.get(scope.run_id, self.name))
        source = member.source if member is not None else self.source  # the agent that gave the output (handoffs)
        listed = list(source.output_guardrails or [])
        if not listed:
            return []
        value = output if self.output_schema is None else self._adapter().validate_python(output)
        rcw = await self.wrapper(scope)
        return await guardrails.run_all("output", listed, lambda g: g.run(rcw, source, value), scope, self.name)

    def _offered_only(self, planned: list[dict[str, Any]], scope: RunScope) -> list[dict[str, Any]]:
        """With handoffs, the definition holds every tool of every agent the run can be handed to:
        a call to a tool the answering agent was not offered is answered as an unknown tool, and a
        second handoff in one reply is not taken (as the SDK's runner answers it)."""
        offered = self._offers.pop(scope.run_id, None)
        if offered is None or (len(self.members) < 2 and not any(m.handoffs for m in self.members.values())):
            return planned
        out: list[dict[str, Any]] = []
        handed = False
        for p in planned:
            name = p["tool_name"]
            if p.get("kind") != "invalid" and name not in offered:
                p = _refused(p, "unknown_tool", f"Unknown tool name: {name!r}. Available tools: {', '.join(sorted(offered)) or 'none'}")
            elif isinstance(self.tool(name), HandoffTool) and p.get("kind") != "invalid":
                if handed:
                    p = _refused(p, "invalid_arguments", "Multiple handoffs detected, ignoring this one.")
                handed = True
            out.append(p)
        return out

    def _rule(self, name: str) -> Any:
        tool = self.tool(name)
        return tool.approval_rule if isinstance(tool, SdkTool) else None

    # --- the model request ------------------------------------------------------------------------

    def _members(self) -> list[Member]:
        return list(self.members.values()) or [Member(self.name, self.source, self.sdk_model, self.sdk_settings, sub_agents=self.sub_agents, lister=self.lister)]

    async def _offered(self, member: Member, scope: RunScope) -> tuple[list[Any], list[Any]]:
        """The tools and handoffs the model is offered: the answering agent's tools (as
        ``get_all_tools`` lists them now), its sub-agents, its enabled handoffs, and ``final_result``."""
        from agents import FunctionTool

        if len(self.members) < 2 and not member.handoffs:
            tools: list[SdkTool] = [t for t in self.tools if isinstance(t, SdkTool)]
            enabled: list[Any] = []
        else:
            rcw = await self.wrapper(scope)
            tools = self.read_tools(await home.at_home(scope.session_id, member.listing.get_all_tools(rcw)))
            enabled = [h.handoff for h in member.handoffs if await home.at_home(scope.session_id, _enabled(h.handoff, rcw, member.source))]
        offered: list[Any] = [t.listed for t in tools]
        for client in self.client_tools:
            d = client.definition()
            offered.append(FunctionTool(name=d.name, description=d.description or "", params_json_schema=d.parameters_json_schema,
                                        on_invoke_tool=_never_called, strict_json_schema=bool(d.strict)))
        for sub in member.sub_agents:
            d = sub.definition()
            offered.append(FunctionTool(name=d.name, description=d.description or "", params_json_schema=SubAgentInput.model_json_schema(),
                                        on_invoke_tool=_never_called, strict_json_schema=True))
        if self.output_schema is not None:
            offered.append(FunctionTool(name=FINISH_TOOL, description=_output_description(self.output_schema),
                                        params_json_schema=self.output_schema.json_schema(), on_invoke_tool=_never_called,
                                        strict_json_schema=self.output_schema.is_strict_json_schema()))
        names = {t.name for t in offered} | {h.tool_name for h in enabled}
        self._offers[scope.run_id] = names
        if len(self._offers) > 256:
            self._offers.pop(next(iter(self._offers)))
        return offered, enabled

    def _settings(self, history: list[ModelMessage], member: Member | None = None) -> Any:
        """The agent's model settings for this request: a ``tool_choice`` the app set is reset once a
        tool has answered (``reset_tool_choice``, as the SDK's runner does), and a structured output
        makes a tool call required (the output is the ``final_result`` call)."""
        from pydantic_ai.messages import ModelRequest, ToolReturnPart

        settings = member.settings if member is not None else self.sdk_settings
        source = member.source if member is not None else self.source
        choice = settings.tool_choice
        if choice is not None and source.reset_tool_choice and any(
            isinstance(m, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in m.parts) for m in history
        ):
            choice = None
        if self.output_schema is not None and choice in (None, "auto"):
            choice = "required"
        return dataclasses.replace(settings, tool_choice=choice) if choice != settings.tool_choice else settings

    async def _request_args(self, messages_: list[ModelMessage], instructions: str | None, scope: RunScope) -> tuple[Member, dict[str, Any]]:
        """The answering agent and the arguments of its model's request (``get_response`` and
        ``stream_response`` take the same): no server-side state, the whole transcript every time."""
        from agents.models.interface import ModelTracing

        member = self.answering(messages_)
        self._answering[scope.run_id] = member.name
        if len(self._answering) > 256:
            self._answering.pop(next(iter(self._answering)))
        if member.source is not self.source:  # handed to: the agent handed to speaks with its own instructions
            instructions = await home.at_home(scope.session_id, member.source.get_system_prompt(await self.wrapper(scope)))
        tools, handed = await self._offered(member, scope)
        items = messages.to_items(messages_)
        # inside the run's SDK trace, the model opens its own generation/response span (sdk_tracing)
        tracing = ModelTracing.ENABLED if sdk_tracing.sensitive() else ModelTracing.ENABLED_WITHOUT_DATA
        return member, {"system_instructions": instructions, "input": items, "model_settings": self._settings(messages_, member),
                        "tools": tools, "output_schema": None, "handoffs": handed, "tracing": tracing, "previous_response_id": None,
                        "conversation_id": None, "prompt": None}

    async def request(self, messages_: list[ModelMessage], instructions: str | None, scope: RunScope) -> ModelResponse:
        """One ``get_response`` of the agent's own model, with the provider SDK's own retries off (the
        step's budget is the only one) and no server-side state: the whole transcript every time."""
        from agents.models._retry_runtime import provider_managed_retries_disabled
        from pydantic_ai.models.openai._errors import map_api_errors

        member, asking = await self._request_args(messages_, instructions, scope)
        with provider_managed_retries_disabled(True), map_api_errors(member.model_name), sdk_tracing.in_sdk_trace(scope, self.name):
            reply = await member.sdk_model.get_response(**asking)
        return messages.to_response(reply, member.model_name)

    async def stream(self, messages_: list[ModelMessage], instructions: str | None, scope: RunScope, events: StreamEvents) -> ModelResponse:
        """``request``, streamed (``Runtime(live_output=True)``): the same request through the model's
        ``stream_response``, each text, argument and reasoning delta handed to ``events`` as it comes
        (``streaming.py``); the reply is the one ``request`` would have recorded."""
        from agents.models._retry_runtime import provider_managed_retries_disabled
        from pydantic_ai.models.openai._errors import map_api_errors

        from . import streaming

        member, asking = await self._request_args(messages_, instructions, scope)
        with provider_managed_retries_disabled(True), map_api_errors(member.model_name), sdk_tracing.in_sdk_trace(scope, self.name):
            reply = await streaming.collect(member.sdk_model.stream_response(**asking), events, member.model_name)
        return messages.to_response(reply, member.model_name)

    def answering(self, messages_: list[ModelMessage]) -> Member:
        """The agent that answers the next request: the entry agent, switched by each handoff the
        transcript records as answered since the last user message (``handoffs.current``)."""
        members = self._members()
        if len(members) < 2:
            return members[0]
        routes = {m.name: {h.name: h.target for h in m.handoffs} for m in members}
        return self.members[handoffs.current(messages_, self.name, routes)]

    # --- the output ---------------------------------------------------------------------------------

    def output_definition(self) -> ToolDefinition | None:
        if self.output_schema is None:
            return None
        from pydantic_ai.tools import ToolDefinition

        return ToolDefinition(name=FINISH_TOOL, description=_output_description(self.output_schema),
                              parameters_json_schema=self.output_schema.json_schema(), strict=self.output_schema.is_strict_json_schema())

    def validate_output(self, args: Any) -> Any:
        """The output as the SDK's ``AgentOutputSchema.validate_json`` reads it; a refusal is a
        ``pydantic.ValidationError`` (the model gets a retry prompt, as for any invalid call)."""
        from agents.exceptions import ModelBehaviorError

        if self.output_schema is None:
            raise ConfigurationError(f"agent {self.name!r} has no output_type: its output is the model's text")
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        try:
            return self.output_schema.validate_json(text or "{}")
        except ModelBehaviorError as exc:
            cause = exc.__cause__
            if isinstance(cause, pydantic.ValidationError):
                raise cause from None
            raise pydantic.ValidationError.from_exception_data(
                FINISH_TOOL, [{"type": "value_error", "loc": ("response",), "input": args, "ctx": {"error": ValueError(str(exc))}}]
            ) from None

    # --- a body -------------------------------------------------------------------------------------

    async def call_tool(self, tool: SdkTool, raw: dict[str, Any], call: ToolContext) -> Any:
        """One body with the run's context object, on the run's home loop when it has one."""
        scope = self._scopes.get(call.run_id) or RunScope(call.session_id, call.run_id)
        deps = await self.deps_for(scope)
        source = self._tool_agents.get(tool.name, self.source)  # the agent whose tool it is (handoffs)
        with sdk_tracing.in_sdk_trace(scope, self.name), sdk_tracing.function(tool.name, json.dumps(raw, ensure_ascii=False)) as span:
            value = await home.at_home(call.session_id, tool.run_body(raw, call, deps, source))
            sdk_tracing.output(span, value)
        return value

    async def call_handoff(self, tool: HandoffTool, raw: dict[str, Any], call: ToolContext) -> Any:
        """A handoff's body: the SDK's ``on_invoke_handoff`` (the input checked against its
        ``input_type``, ``on_handoff`` called) with the run's context; its answer names the agent
        handed to, which is what switches the agent (``handoffs.current``)."""
        from agents import RunContextWrapper

        scope = self._scopes.get(call.run_id) or RunScope(call.session_id, call.run_id)
        rcw = RunContextWrapper(context=await self.deps_for(scope))
        token = policies.CURRENT_CALL.set(call)
        asking = self._answering.get(call.run_id, self.name)
        try:
            with sdk_tracing.in_sdk_trace(scope, self.name), sdk_tracing.handoff(asking, tool.target):
                await home.at_home(call.session_id, tool.handoff.on_invoke_handoff(rcw, json.dumps(raw, ensure_ascii=False)))
        finally:
            policies.CURRENT_CALL.reset(token)
        return handoffs.answer(tool.target)


def _refused(planned: dict[str, Any], code: str, message: str) -> dict[str, Any]:
    """A planned call answered at once, as planning answers an unknown tool: no body, a retry prompt."""
    return {**planned, "kind": "invalid", "status": "error", "paired_by": "validation", "error": {"code": code, "message": message},
            "requires_approval": False}


async def _enabled(handoff: Any, rcw: Any, agent: Any) -> bool:
    """A handoff's ``is_enabled`` as the SDK's ``get_handoffs`` asks it: a bool, or a function of the
    run context and the agent offering it (sync or async)."""
    import inspect

    attr = handoff.is_enabled
    if isinstance(attr, bool):
        return attr
    result = attr(rcw, agent)
    return bool(await result if inspect.isawaitable(result) else result)


def _output_description(schema: Any) -> str:
    return f"The final response, as {schema.name()}."


