"""An OpenAI Agents SDK ``agents.Agent`` as it is, read into an ``hx.Agent``.

The SDK's ``Runner`` is not used: the run workflow keeps its own loop (the model's reply recorded
before anything acts on it, every call saved first with a dispatch id, each body between its
attempt gate and its result write). What is the SDK's runs as the SDK runs it: the agent's own
model object (``OpenAIChatCompletionsModel``, ``OpenAIResponsesModel``, any ``agents.Model``) is
asked with ``get_response``, the agent's function tools' own ``on_invoke_tool`` is each body, its
instructions (static or a function of the run context) are rendered per request with
``get_system_prompt``, ``is_enabled`` is honoured through ``get_all_tools``, ``needs_approval`` gates
a call, and ``output_type`` is validated by the SDK's ``AgentOutputSchema``. ``mcp_servers`` are
listed by the SDK too, through the adapter's own connections to them (``mcp.py``), and their tools
are function tools like the others. What the runtime cannot honour is refused when the agent is
read (``features.py``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic

from ...definitions import home
from ...definitions.agents import FINISH_TOOL, Agent, SubAgent, SubAgentInput
from ...definitions.context import RunScope, ToolContext
from ...definitions.model_retries import ModelRetries
from ...definitions.run_deps import RunDeps
from ...definitions.tools import Tool
from ...errors import ConfigurationError, UnsupportedFeatureError
from . import features, messages
from .tools import SdkTool, read_tool

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.tools import ToolDefinition

log = logging.getLogger("helix_dbos")

DepsFactory = Callable[[Any], Any | Awaitable[Any]]


def _never_called(*_: Any) -> Any:  # pragma: no cover - the runtime answers these, the SDK never invokes them here
    raise AssertionError("an offered tool is answered by the runtime, not invoked by the SDK")


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
    _deps: RunDeps = field(default_factory=RunDeps, init=False, repr=False)
    _scopes: dict[str, RunScope] = field(default_factory=dict, init=False, repr=False)
    #: the agent whose tools are listed: ``source`` itself, or (with ``mcp_servers``) a clone of it
    #: whose servers are ``mcp.LinkedServer``s, connected by the adapter wherever the step runs
    lister: Any = None
    _read: dict[int, tuple[Any, SdkTool]] = field(default_factory=dict, init=False, repr=False)
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

    def read_tools(self, listed: list[Any]) -> list[SdkTool]:
        """The SDK's tools as ``SdkTool``s; each object is read once (its quiet copy kept) while it
        is listed (an MCP server's tools are new objects at each listing: only this listing's are kept)."""
        out: list[SdkTool] = []
        read: dict[int, tuple[Any, SdkTool]] = {}
        for tool in listed:
            kept = self._read.get(id(tool))
            if kept is None or kept[0] is not tool:
                kept = (tool, read_tool(tool, self, self.name, self.tool_policies.get(getattr(tool, "name", "")), self.tool_timeout))
            read[id(tool)] = kept
            out.append(kept[1])
        self._read = read
        names = [t.name for t in out] + [s.tool_name for s in self.sub_agents]
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
        try:
            listed = await home.at_home(scope.session_id, self.lister.get_all_tools(rcw))
        except Exception as exc:  # noqa: BLE001 keep the last good listing; say why in the log
            log.warning("agent %r: its tools could not be listed: %s", self.name, exc)
            return
        self.tools = list(self.read_tools(listed))
        self._listed = True

    async def catalog(self) -> tuple[list[Tool], list[dict[str, str]]]:
        """Every tool with its policy, and the MCP servers that could not list theirs (with why).

        A run's listing, when this process has one, is the one shown; else the agent is listed now
        with a context of no run (``context`` is ``None``: an ``is_enabled`` that needs a run's
        context shows the agent's tools unlisted, with why). An MCP server is connected once and
        kept, so a read does not start it again; one that failed is asked again at the next read."""
        from .mcp import LinkedServer

        if self.lister is self.source:  # no MCP server: the tools as read are the catalog
            return list(self.tools), []
        unlisted: list[dict[str, str]] = []
        if not self._listed:
            from agents import RunContextWrapper

            try:
                listed = await self.lister.get_all_tools(RunContextWrapper(context=None))
                tools = self.read_tools(listed)
            except Exception as exc:  # noqa: BLE001 shown to the operator as "could not be listed", with why
                return list(self.tools), [{"toolset": f"agent {self.name!r}", "error": f"{type(exc).__name__}: {exc}"}]
            if not self._listed:  # a run listed meanwhile: its listing is the one kept
                self.tools = list(tools)
        for server in self.lister.mcp_servers:
            if isinstance(server, LinkedServer) and server.listed is None and server.error is not None:
                unlisted.append({"toolset": server.name, "error": server.error})
        return list(self.tools), unlisted

    async def instructions_for(self, scope: RunScope) -> str | None:
        """``instructions`` as the SDK renders them: a string, or the function called with the run's
        context and the agent, for every request (a recovered run renders them again)."""
        rcw = await self.wrapper(scope)
        return await home.at_home(scope.session_id, self.source.get_system_prompt(rcw))

    async def review_plan(self, planned: list[dict[str, Any]], scope: RunScope) -> list[dict[str, Any]]:
        """A tool's ``needs_approval`` function, asked per call with the run's context, the arguments
        and the call id, inside the model step (recorded with the reply); one that raises asks a human."""
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

    def _rule(self, name: str) -> Any:
        tool = self.tool(name)
        return tool.approval_rule if isinstance(tool, SdkTool) else None

    # --- the model request ------------------------------------------------------------------------

    def _offered(self) -> list[Any]:
        """The tools the model is offered: the agent's, its sub-agents', and ``final_result``."""
        from agents import FunctionTool

        offered: list[Any] = [t.listed for t in self.tools if isinstance(t, SdkTool)]
        for sub in self.sub_agents:
            d = sub.definition()
            offered.append(FunctionTool(name=d.name, description=d.description or "", params_json_schema=SubAgentInput.model_json_schema(),
                                        on_invoke_tool=_never_called, strict_json_schema=True))
        if self.output_schema is not None:
            offered.append(FunctionTool(name=FINISH_TOOL, description=_output_description(self.output_schema),
                                        params_json_schema=self.output_schema.json_schema(), on_invoke_tool=_never_called,
                                        strict_json_schema=self.output_schema.is_strict_json_schema()))
        return offered

    def _settings(self, history: list[ModelMessage]) -> Any:
        """The agent's model settings for this request: a ``tool_choice`` the app set is reset once a
        tool has answered (``reset_tool_choice``, as the SDK's runner does), and a structured output
        makes a tool call required (the output is the ``final_result`` call)."""
        from pydantic_ai.messages import ModelRequest, ToolReturnPart

        settings = self.sdk_settings
        choice = settings.tool_choice
        if choice is not None and self.source.reset_tool_choice and any(
            isinstance(m, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in m.parts) for m in history
        ):
            choice = None
        if self.output_schema is not None and choice in (None, "auto"):
            choice = "required"
        return dataclasses.replace(settings, tool_choice=choice) if choice != settings.tool_choice else settings

    async def request(self, messages_: list[ModelMessage], instructions: str | None, scope: RunScope) -> ModelResponse:
        """One ``get_response`` of the agent's own model, with the provider SDK's own retries off (the
        step's budget is the only one) and no server-side state: the whole transcript every time."""
        from agents.models._retry_runtime import provider_managed_retries_disabled
        from agents.models.interface import ModelTracing
        from pydantic_ai.models.openai._errors import map_api_errors

        items = messages.to_items(messages_)
        with provider_managed_retries_disabled(True), map_api_errors(self.model_name):
            reply = await self.sdk_model.get_response(
                system_instructions=instructions, input=items, model_settings=self._settings(messages_), tools=self._offered(),
                output_schema=None, handoffs=[], tracing=ModelTracing.DISABLED, previous_response_id=None, conversation_id=None,
                prompt=None,
            )
        return messages.to_response(reply, self.model_name)

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
        return await home.at_home(call.session_id, tool.run_body(raw, call, deps, self.source))


def _output_description(schema: Any) -> str:
    return f"The final response, as {schema.name()}."


def _output_schema(declared: Any, name: str) -> tuple[Any, Any]:
    """``(output schema, python type)`` for ``Agent(output_type=...)``: ``None`` for text."""
    from agents import AgentOutputSchema, AgentOutputSchemaBase

    if declared is None or declared is str:
        return None, None
    if isinstance(declared, AgentOutputSchema):
        return (None, None) if declared.is_plain_text() else (declared, declared.output_type)
    if isinstance(declared, AgentOutputSchemaBase):
        raise UnsupportedFeatureError(f"agent {name!r}: a custom AgentOutputSchemaBase cannot be stored as JSON; give the type or AgentOutputSchema(type)")
    return AgentOutputSchema(declared), declared


def mcp_lister(agent: Any) -> Any:
    """The agent whose tools a run lists: with ``mcp_servers``, a clone whose servers are the
    adapter's links to the app's (the app's agent and servers are left as they are)."""
    if not agent.mcp_servers:
        return agent
    from .mcp import LinkedServer

    return agent.clone(mcp_servers=[LinkedServer(server) for server in agent.mcp_servers])


def _model_of(agent: Any, name: str, provider: Any) -> Any:
    from agents.models.interface import Model

    if isinstance(agent.model, Model):
        return agent.model
    if provider is None:
        from agents import MultiProvider

        provider = MultiProvider()
    return provider.get_model(agent.model)


def from_openai_agents(
    agent: Any,
    *,
    name: str | None = None,
    tool_policies: Mapping[str, Mapping[str, Any]] | None = None,
    deps_factory: DepsFactory | None = None,
    model_provider: Any = None,
    max_steps: int | None = None,
    tool_timeout: float | None = None,
    sub_agents: list[SubAgent] | None = None,
    model_retries: ModelRetries | None = None,
) -> OpenAIAgentsAgent:
    """Read an ``agents.Agent`` into an ``hx.Agent``; refuses what the runtime cannot honour.

    ``tool_policies`` maps a tool name to policy keys and wins over the tool's own ``openai_policy``.
    ``deps_factory(deps_input)`` rebuilds the run's context object (``RunContextWrapper.context``,
    what tools and dynamic instructions see) from the JSON the run was started with. A model given
    by name is resolved by ``model_provider`` (default: the SDK's ``MultiProvider``). ``max_steps``:
    model requests per run (the SDK's ``max_turns``; default 50). ``tool_timeout``: the bound on a
    body without its own ``timeout_seconds`` (default 120 s). ``sub_agents``: helix sub-agents
    offered beside the agent's tools.
    """
    from agents import Agent as SdkAgent

    if not isinstance(agent, SdkAgent):
        raise ConfigurationError(f"from_openai_agents needs an agents.Agent, not {type(agent).__name__}")
    agent_name = name or agent.name
    features.check_agent(agent, agent_name)
    schema, output_type = _output_schema(agent.output_type, agent_name)
    made = OpenAIAgentsAgent(
        name=agent_name,
        model=_model_of(agent, agent_name, model_provider),
        instructions=agent.instructions if isinstance(agent.instructions, str) else None,
        output_type=output_type,
        max_steps=max_steps or 50,
        sub_agents=list(sub_agents or []),
        model_retries=model_retries,
        source=agent,
        sdk_settings=agent.model_settings,
        output_schema=schema,
        tool_policies={k: dict(v) for k, v in (tool_policies or {}).items()},
        deps_factory=deps_factory,
        tool_timeout=tool_timeout,
    )
    made.sdk_model = made.model
    made.lister = mcp_lister(agent)
    unknown = set(made.tool_policies) - {getattr(t, "name", None) for t in agent.tools}
    if unknown and not agent.mcp_servers:  # an MCP server's tools are named when it is listed, in a run
        raise ConfigurationError(f"agent {agent_name!r}: tool_policies name tools it does not have: {sorted(unknown)}")
    made.tools = list(made.read_tools(list(agent.tools)))
    return made

