"""Agents and sub-agents: data, resolved by name when a run needs them.

An agent is never stored; runs name it. A recovered run therefore uses the agent as the code now
defines it, which is what lets recovery compare a saved call's policy with the tool as it is now.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pydantic

from ..errors import ConfigurationError
from .context import RunScope
from .model_requests import Asking, StreamEvents
from .model_retries import ModelRetries
from .tools import Tool

if TYPE_CHECKING:  # pydantic-ai loads when a run first asks a model, not when agents are defined
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models import Model
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import ToolDefinition

SubAgentMode = Literal["remote", "local", "companion"]
FINISH_TOOL = "final_result"
SUBAGENT_PREFIX = "subagent__"
DEFAULT_MODEL_RETRIES = ModelRetries()


class SubAgentInput(pydantic.BaseModel):
    """What a parent's model sends a sub-agent: one message, the child's whole turn."""

    message: str = pydantic.Field(description="The task or question for the sub-agent.")


@dataclass(frozen=True)
class SubAgent:
    """A child agent offered to the parent's model as a tool named ``subagent__<name>``.

    ``remote``: the child's run is a DBOS child workflow whose id is the call's dispatch id, on a
    queue any worker serves. ``local``: the child loop runs inside the call body, in process.
    ``companion``: one child session kept across the parent's calls, each call one turn of it.
    """

    agent: Agent
    mode: SubAgentMode
    description: str | None = None
    #: the tool name the parent's model is offered, when not ``subagent__<name>``: an SDK that names
    #: its agent tools itself (the OpenAI Agents SDK's ``agent.as_tool(tool_name=...)``) keeps its name
    tool: str | None = None

    def __post_init__(self) -> None:
        if self.tool is not None and (not self.tool or not all(ch.isalnum() or ch in "-_" for ch in self.tool)):
            raise ConfigurationError(f"sub-agent {self.agent.name!r}: tool name {self.tool!r}: use letters, digits, '-' or '_'")
        if self.mode == "local" and self.agent.uses_scope():
            from ..errors import UnsupportedFeatureError

            raise UnsupportedFeatureError(
                f"sub-agent {self.agent.name!r}: a pydantic-ai agent runs as a remote or companion sub-agent, not local"
            )
        if self.mode == "local" and type(self.agent).request is not Agent.request:
            from ..errors import UnsupportedFeatureError

            # a local child is pydantic-ai's own loop over the agent's pydantic-ai model
            # (runtime/flow/local_child.py): an agent that asks its model its own way has none
            raise UnsupportedFeatureError(
                f"sub-agent {self.agent.name!r}: an agent of another SDK runs as a remote or companion sub-agent, not local"
            )

    @property
    def tool_name(self) -> str:
        return self.tool or f"{SUBAGENT_PREFIX}{self.agent.name}"

    def definition(self) -> ToolDefinition:
        from pydantic_ai.tools import ToolDefinition

        return ToolDefinition(
            name=self.tool_name,
            description=self.description or f"Delegate to the {self.agent.name} agent. {self.agent.instructions or ''}".strip(),
            parameters_json_schema=SubAgentInput.model_json_schema(),
        )


def remote_agent(agent: Agent, description: str | None = None) -> SubAgent:
    return SubAgent(agent, "remote", description)


def local_agent(agent: Agent, description: str | None = None) -> SubAgent:
    return SubAgent(agent, "local", description)


def companion_agent(agent: Agent, description: str | None = None) -> SubAgent:
    return SubAgent(agent, "companion", description)


@dataclass
class Agent:
    """An agent: a model, its instructions, its tools and sub-agents.

    ``model`` is a pydantic-ai ``Model`` or a ``"provider:model"`` string, resolved on first use so
    an agent can be defined (and its runs recovered) without the provider's credentials at import.
    With ``output_type`` set, the model is offered a ``final_result`` tool of that schema and the
    run's output is its validated argument; without it, a text reply ends the run.
    """

    name: str
    model: Model | str
    instructions: str | None = None
    tools: list[Tool] = field(default_factory=list)
    sub_agents: list[SubAgent] = field(default_factory=list)
    output_type: type[Any] | None = None
    max_steps: int = 50
    model_settings: ModelSettings | None = None
    #: the model request step's retry budget; ``None``: ``1 + model_settings["max_retries"]`` requests
    #: when the settings say, else ``ModelRetries()`` (4 requests)
    model_retries: ModelRetries | None = None
    #: replies that give no valid output (text or nothing where output is required, an invalid
    #: ``final_result``, an output validator's ``ModelRetry``) answered with a retry prompt before the
    #: run fails ``output_retries_exceeded``: pydantic-ai's ``output_retries`` (default 1)
    output_retries: int = 1
    _model: Model | None = field(default=None, init=False, repr=False)
    _output_adapter: pydantic.TypeAdapter[Any] | None = field(default=None, init=False, repr=False)
    _output_tool: Any = field(default=None, init=False, repr=False)  # pydantic-ai's ObjectOutputProcessor

    def __post_init__(self) -> None:
        if not self.name or not all(ch.isalnum() or ch in "-_." for ch in self.name):
            raise ConfigurationError(f"agent name {self.name!r}: use letters, digits, '-', '_' or '.'")
        if self.max_steps < 1:
            raise ConfigurationError("max_steps must be at least 1")
        if type(self.output_retries) is not int or self.output_retries < 0:
            raise ConfigurationError(f"agent {self.name!r}: output_retries must be an int >= 0, not {self.output_retries!r}")
        if self.model_retries is not None and not isinstance(self.model_retries, ModelRetries):
            raise ConfigurationError(f"agent {self.name!r}: model_retries must be an hx.ModelRetries, not {self.model_retries!r:.80}")
        self._check_entries("tools", self.tools, Tool, "decorate a function with @hx.tool (or build one with hx.define_tool / hx.client_tool)")
        self._check_entries("sub_agents", self.sub_agents, SubAgent, "wrap an agent with hx.remote_agent, hx.local_agent or hx.companion_agent")
        names = [t.name for t in self.tools] + [s.tool_name for s in self.sub_agents]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ConfigurationError(f"agent {self.name!r}: duplicate tool names {sorted(dupes)}")
        if FINISH_TOOL in names:
            raise ConfigurationError(f"agent {self.name!r}: {FINISH_TOOL!r} is reserved for structured output")
        if self.output_type is not None:
            self._output_adapter = pydantic.TypeAdapter(self.output_type)

    def _check_entries(self, field_name: str, entries: Any, kind: type, how: str) -> None:
        """Refuse, at construction, an entry that is not a ``kind`` (a bare function, ``...``, a name),
        naming it: found later, it was an ``AttributeError`` deep in the first run."""
        if isinstance(entries, (str, bytes)) or not isinstance(entries, (list, tuple)):
            raise ConfigurationError(f"agent {self.name!r}: {field_name} must be a list, not {type(entries).__name__} {entries!r:.80}")
        for index, entry in enumerate(entries):
            if not isinstance(entry, kind):
                raise ConfigurationError(
                    f"agent {self.name!r}: {field_name}[{index}] is {entry!r:.80} ({type(entry).__name__}), not a {kind.__name__}: {how}",
                    detail={"field": field_name, "index": index, "type": type(entry).__name__},
                )
        if isinstance(entries, tuple):
            setattr(self, field_name, list(entries))

    # --- the hooks the runtime calls (helix_dbos/adapters/base.py AgentSeam): a pydantic-ai model's
    # --- defaults here; an adapter's agent (helix_dbos/adapters/<sdk>/) overrides what its SDK does

    async def refresh(self, scope: RunScope) -> None:
        """Bring ``tools`` up to date for this run before the runtime reads them (list toolsets)."""
        return None

    async def catalog(self) -> tuple[list[Tool], list[dict[str, str]]]:
        """Every tool with its policy for ``GET /agents``, and the toolsets that could not be listed."""
        return list(self.tools), []

    async def instructions_for(self, scope: RunScope) -> str | None:
        """The instructions of this model request; dynamic ones are rendered for the run."""
        return self.instructions

    async def review_plan(self, planned: list[dict[str, Any]], scope: RunScope) -> list[dict[str, Any]]:
        """A last look at the planned calls inside the model step (output validators run here)."""
        return planned

    async def check_input(self, messages: list[ModelMessage], scope: RunScope) -> list[dict[str, Any]]:
        """Checks on the run's input before this step's model request (an SDK's input guardrails),
        each one's result as a JSON object, recorded with the step's reply; a check that trips
        raises a typed error (``GuardrailTrippedError``), which the step records as its outcome.
        Called at most once per step, however often the request is asked again. None here."""
        return []

    async def check_output(self, output: Any, scope: RunScope) -> list[dict[str, Any]]:
        """Checks on the run's final output (the text or the ``final_result`` as the run will store
        it), inside the step whose reply gives it, before the reply is recorded: as ``check_input``.
        None here."""
        return []

    def uses_scope(self) -> bool:
        """Whether the hooks need a ``RunScope`` (a deps read): plain agents skip the read."""
        return False

    async def request(self, messages: list[ModelMessage], instructions: str | None, scope: RunScope) -> ModelResponse:
        """Ask the model once: pydantic-ai's direct request with this agent's tools (``model_requests.py``)."""
        from . import model_requests

        return await model_requests.request(self._asking(), messages, instructions)

    def prepare(self, messages: list[ModelMessage], instructions: str | None, scope: RunScope) -> Callable[[], Awaitable[ModelResponse]]:
        """``request``, with all that can be built before the request's rate grant built now (the
        tools' definitions, the messages with this request's instructions, pydantic-ai's import); the
        returned call sends it. A provider counts a request when it arrives, so work done between
        the grant and the send lets two windows' requests arrive closer than the rate allows. A
        subclass that overrides ``request`` is sent through it as it is."""
        if type(self).request is not Agent.request:
            return lambda: self.request(messages, instructions, scope)
        from . import model_requests

        return model_requests.prepared(self._asking(), messages, instructions)

    async def stream(self, messages: list[ModelMessage], instructions: str | None, scope: RunScope, events: StreamEvents) -> ModelResponse:
        """``request``, streamed to ``events`` (live output). A subclass that overrides ``request``
        and not this is asked through its ``request`` (it streams nothing): overriding ``stream`` is
        optional for an adapter, answering with another SDK's request is never the default."""
        if type(self).request is not Agent.request:
            return await self.request(messages, instructions, scope)
        from . import model_requests

        return await model_requests.stream(self._asking(), messages, instructions, events)

    def check_model(self) -> None:
        """Build the model now: the service calls it before it takes a request, so a missing provider
        package or key refuses the start instead of failing every run. An agent that asks its model
        its own way (``request`` overridden) checks its own model, or nothing, here."""
        if type(self).request is Agent.request:
            self.resolved_model()

    def _asking(self) -> Asking:
        """The model, settings and offered tools of a request, read now (tools may have been refreshed)."""
        definitions = [t.definition() for t in self.tools] + [s.definition() for s in self.sub_agents]
        return Asking(self.resolved_model(), self.model_settings, definitions, self.output_definition())

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether ``request`` raising ``exc`` is worth another request in the same step."""
        from . import model_requests

        return model_requests.is_retryable(exc)

    def resolved_model(self) -> Model:
        if self._model is None:
            from pydantic_ai.models import Model, infer_model

            self._model = self.model if isinstance(self.model, Model) else infer_model(self.model)
        return self._model

    def retry_policy(self) -> ModelRetries:
        """The model request step's retry budget (see ``model_retries``)."""
        if self.model_retries is not None:
            return self.model_retries
        n = (self.model_settings or {}).get("max_retries")
        if type(n) is int and n >= 0:
            return ModelRetries(attempts=n + 1)
        return DEFAULT_MODEL_RETRIES

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def sub_agent(self, tool_name: str) -> SubAgent | None:
        return next((s for s in self.sub_agents if s.tool_name == tool_name), None)

    def output_definition(self) -> ToolDefinition | None:
        """The ``final_result`` tool, built by pydantic-ai's own output machinery: the schema (root
        ``$defs``, a non-object type wrapped as ``{"response": ...}``), description and ``strict`` a
        plain ``agent.run`` sends for the same type, so it is self-contained and valid JSON Schema."""
        processor = self._output_processor()
        if processor is None:
            return None
        from pydantic_ai._output import output_tool_def

        return output_tool_def(FINISH_TOOL, processor, multiple=False)

    def output_tool_options(self) -> tuple[str | None, bool | None]:
        """The output tool's ``description`` and ``strict`` (``ToolOutput``'s, for a pydantic-ai agent)."""
        return None, None

    def _output_processor(self) -> Any:
        if self.output_type is None:
            return None
        if self._output_tool is None:
            from pydantic_ai._output import ObjectOutputProcessor

            description, strict = self.output_tool_options()
            self._output_tool = ObjectOutputProcessor(output=self.output_type, description=description, strict=strict)
        return self._output_tool

    def _adapter(self) -> pydantic.TypeAdapter[Any]:
        if self._output_adapter is None:
            raise ConfigurationError(f"agent {self.name!r} has no output_type: its output is the model's text")
        return self._output_adapter

    def validate_output(self, args: Any) -> Any:
        """The validated structured output; raises ``pydantic.ValidationError``.

        A type pydantic-ai does not take as an object (a scalar, a list, a union, a dict) is the
        argument's ``response``, as the tool's schema says (``outer_typed_dict_key``)."""
        adapter = self._adapter()
        if isinstance(args, str):
            import json

            args = json.loads(args or "{}")
        key = self._output_processor().outer_typed_dict_key
        if key is not None:
            args = (args or {}).get(key) if isinstance(args, dict) else None
        return adapter.validate_python(args)

    def dump_output(self, value: Any) -> Any:
        return self._adapter().dump_python(value, mode="json")
