"""The adapter seam: what an agent SDK's adapter gives the runtime, and what the runtime asks of an agent.

Two protocols, because they are used at two different times:

- ``FrameworkAdapter`` is used once, when ``hx.Runtime(agents=[...])`` is handed an object: it says
  whether the object is one of its SDK's agents, names it, and reads it into a definition.
- ``AgentSeam`` is used at every model step of every run: the hooks the runtime calls on the
  definition. ``hx.Agent`` implements it for an agent whose model is a pydantic-ai ``Model``; an
  adapter's agent is an ``hx.Agent`` subclass that overrides what its SDK does differently.

What stays shared (never an adapter's to change): the ledger's message shape, which is pydantic-ai's
``ModelMessage`` (a reply is a pydantic-ai ``ModelResponse`` whatever SDK asked the model), the
recovery rules, tool policies and their keys, dispatch ids and the entries. An adapter owns how its
SDK's agent becomes a definition (tools and their policies, instructions, catalog), how its model is
asked and its reply read into a ``ModelResponse``, and which of its errors are worth asking again.

This module sits beside ``definitions`` (it imports definitions, never the runtime) and imports no
SDK: an adapter looks at ``sys.modules`` before ``isinstance``, so an SDK that was never imported by
the application is never imported by helix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..definitions.agents import Agent, SubAgent
from ..definitions.context import RunScope
from ..definitions.model_requests import StreamEvents
from ..definitions.tools import Tool

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage, ModelResponse

#: Per-agent tool policies as ``hx.Runtime(tool_policies={agent: {tool: {...}}})`` hands them to an
#: adapter: one agent's ``{tool name: {policy key: value}}`` (keys ``POLICY_KEYS``); they win over
#: everything a tool says of itself.
ToolPolicies = Mapping[str, Mapping[str, Any]]

#: ``hx.Runtime(deps_factories={agent: factory})``: rebuilds an agent's per-run context object (its
#: SDK's deps/context) from the JSON a run was started with, in whichever process runs the step (a
#: coroutine function too: its result is awaited).
DepsFactory = Callable[[Any], Any | Awaitable[Any]]

#: The policy keys a tool may declare or be given (``definitions/tools.py`` reads them); shared by
#: every adapter, so a policy means the same whatever SDK defined the tool.
POLICY_KEYS = frozenset({"replay", "concurrency_group", "sequential", "requires_approval"})


@runtime_checkable
class AgentSeam(Protocol):
    """The hooks the runtime calls on an agent definition; nothing else of an SDK reaches the runtime.

    Besides these, the runtime reads the definition's data: ``name``, ``tools`` (``hx.Tool``s: each
    with its policy, ``definition()``, ``validate`` and ``invoke``), ``sub_agents``, ``max_steps``,
    ``retry_policy()``, ``output_definition()``/``validate_output``/``dump_output`` and
    ``output_retries``, all of which ``hx.Agent`` holds.
    """

    name: str
    tools: list[Tool]
    sub_agents: list[SubAgent]
    max_steps: int

    def uses_scope(self) -> bool:
        """Whether the hooks need the run's ``RunScope`` with its deps input: ``False`` spares every
        model step a read of the session's deps (a plain agent needs none). An agent that says
        ``True`` cannot be a ``local`` sub-agent (its hooks need a run of their own)."""
        ...

    async def refresh(self, scope: RunScope) -> None:
        """Bring ``tools`` up to date for this run's model step, before the runtime reads them: an SDK
        that lists tools per run (toolsets, MCP servers, ``is_enabled``) lists them here. Planning
        and recovery judge a call by the tool as it is after this."""
        ...

    async def catalog(self) -> tuple[list[Tool], list[dict[str, str]]]:
        """Every tool with its policy, for ``GET /agents`` and ``helix-dbos agents``, outside any run;
        and the tool sources that could not be listed (``{"toolset": ..., "error": ...}``), so a
        catalog is shown even when one MCP server is down."""
        ...

    async def instructions_for(self, scope: RunScope) -> str | None:
        """This request's instructions, rendered now from the agent as the code defines it (never
        from storage): dynamic instructions see the run's deps."""
        ...

    async def review_plan(self, planned: list[dict[str, Any]], scope: RunScope) -> list[dict[str, Any]]:
        """A last look at the calls planned from a reply, inside the model step, before they are
        recorded with it: approvals decided by the SDK's own rules, output validators, guardrails.
        It sees and returns plain dicts with a recorded plan's keys; a typed error fails the step."""
        ...

    async def check_input(self, messages: list[ModelMessage], scope: RunScope) -> list[dict[str, Any]]:
        """Checks on the run's input (its SDK's input guardrails) before the step's model request,
        at most once per step: each result a JSON object, recorded with the step's reply, so a
        replay never runs them again; a tripwire raises a typed error (``GuardrailTrippedError``),
        recorded as the step's outcome. The adapter decides when the transcript holds new input."""
        ...

    async def check_output(self, output: Any, scope: RunScope) -> list[dict[str, Any]]:
        """Checks on the run's final output (its SDK's output guardrails), in the step whose reply
        gives it, recorded as ``check_input``'s are. ``output`` is the text or the ``final_result``
        as the run will store it (JSON)."""
        ...

    async def request(self, messages: list[ModelMessage], instructions: str | None, scope: RunScope) -> ModelResponse:
        """Ask the model once (no retries of its own: the runtime's ``ModelRetries`` budget is the only
        one) with the transcript so far and this request's instructions, offering ``tools``,
        sub-agents and the output tool; the reply read into a pydantic-ai ``ModelResponse``, which
        the ledger records as it is. A provider's error is raised, ideally as pydantic-ai's
        ``ModelAPIError`` family, so a run that gives up fails with a typed code."""
        ...

    def prepare(self, messages: list[ModelMessage], instructions: str | None, scope: RunScope) -> Callable[[], Awaitable[ModelResponse]]:
        """``request`` built now and sent by the returned call: the runtime prepares before the
        request's rate grant and sends right after it, so a provider that counts arrivals sees the
        rate. ``hx.Agent``'s sends an overridden ``request`` as it is; an adapter whose request has
        costly building of its own (schemas, message conversion) overrides this too."""
        ...

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether ``request`` raising ``exc`` is worth asking again in the same step (rate limit,
        overload, 5xx, network, timeout): only the adapter knows its SDK's error types."""
        ...

    def check_model(self) -> None:
        """Build or check the model now, raising what a missing provider package or key raises: the
        service calls it before taking requests, so such an agent refuses the start instead of
        failing every run; and every model step calls it before its rate grant, so a first build (a
        provider's import) is not paid between grant and send. Cheap once built."""
        ...


@runtime_checkable
class StreamingSeam(AgentSeam, Protocol):
    """An agent whose model can stream, used with ``live_output``. Overriding ``stream`` is optional:
    ``hx.Agent.stream`` asks through ``request`` (streaming nothing) for a subclass that overrides
    ``request`` alone."""

    async def stream(self, messages: list[ModelMessage], instructions: str | None, scope: RunScope, events: StreamEvents) -> ModelResponse:
        """``request``, streamed: each part's start and delta is handed to ``events`` as it comes
        (the runtime writes them to the run's live stream, best effort) and the reply is the same
        ``ModelResponse`` ``request`` would return."""
        ...


@runtime_checkable
class FrameworkAdapter(Protocol):
    """One agent SDK: how ``hx.Runtime(agents=[...])`` recognises its agents and reads them in.

    An adapter module imports no SDK at import time: ``accepts`` looks for the SDK in
    ``sys.modules`` first (an object of a module never imported cannot be one of its agents), and
    ``build`` imports the adapter's heavy half only when handed an object it accepted.
    """

    #: The SDK's name in messages and the registry (``"pydantic_ai"``, ``"openai_agents"``); unique.
    name: str

    def accepts(self, obj: object) -> bool:
        """Whether ``obj`` is one of this SDK's agents; never imports the SDK to find out."""
        ...

    def name_of(self, obj: object) -> str:
        """The name runs will know the agent by, the same in every process (runs resolve agents by
        name); read before ``build`` because the runtime's ``tool_policies`` and ``deps_factories``
        are keyed by it."""
        ...

    def build(self, obj: object, *, name: str, tool_policies: ToolPolicies | None, deps_factory: DepsFactory | None) -> Agent:
        """Read the SDK's agent into an ``hx.Agent`` (a subclass implementing ``AgentSeam`` for the
        SDK): its tools and their policies, instructions, output type, sub-agents and limits.
        Whatever the runtime cannot honour is refused here, with a typed error
        (``UnsupportedFeatureError``/``ConfigurationError``), never found in a run."""
        ...


__all__ = ["POLICY_KEYS", "AgentSeam", "DepsFactory", "FrameworkAdapter", "StreamEvents", "StreamingSeam", "ToolPolicies", "conforms"]


def conforms(agent: Agent) -> StreamingSeam:
    """``hx.Agent`` implements the whole seam: the type checker holds it to that here."""
    return agent
