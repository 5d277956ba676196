"""A ``pydantic_ai.Agent`` as it is, turned into the definitions the run workflow needs.

The workflow keeps its own loop (model request as a DBOS step, save-first append, each body between
its attempt gate and its result write), so a pydantic-ai agent is not *run* by pydantic-ai here: it
is read. Its model, instructions,
model settings and output type become an ``hx.Agent``; every tool its toolsets list (function
toolsets, ``@agent.tool``/``@agent.tool_plain``, MCP servers) becomes a ``Tool`` whose body is the
toolset's own ``call_tool`` with a ``RunContext``. What recovery needs that pydantic-ai does not
say (the replay policy) comes from the tool's ``metadata``, pydantic-ai's own flags, an MCP
server's annotations, or a mapping the app gives; see ``docs/pydantic-ai.md``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import pydantic
from pydantic_ai import Agent as PydanticAIAgent
from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry
from pydantic_ai.messages import ToolReturn
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import RunUsage, UsageLimits

from ...definitions import home
from ...definitions.agents import Agent, SubAgent
from ...definitions.context import RunScope, ToolContext
from ...definitions.model_retries import ModelRetries
from ...definitions.run_deps import RunDeps
from ...definitions.tools import ApprovalRule, Tool
from ...errors import (
    ConfigurationError,
    DispatchIdUnavailableError,
    ToolServerError,
    ToolTimeoutError,
    UnsupportedFeatureError,
)
from ..base import POLICY_KEYS, DepsFactory, ToolPolicies
from ..mcp_tools import looks_like_transport as _looks_like_transport
from ..mcp_tools import replay_from_annotations
from .capabilities import check_capabilities
from .names import infer_agent_name
from .outputs import read_output_type

if TYPE_CHECKING:
    from pydantic_ai.settings import ModelSettings

log = logging.getLogger("helix_dbos")

#: ``RunContext.metadata[HELIX_KEY]`` holds the call's dispatch id, attempt and session for a tool.
HELIX_KEY = "helix"
#: A listing may start the toolset's server (an MCP stdio process importing its SDK), which takes
#: seconds on a busy machine: it is bounded by this or ``tool_timeout``, whichever is longer, so a
#: short per-call bound never hides a server's tools from the model.
LIST_TIMEOUT = 30.0
#: Without ``tool_timeout`` on the agent or the adapter, a tool call waits at most this long.
DEFAULT_TOOL_TIMEOUT = 120.0


def dispatch_id(ctx: RunContext[Any]) -> str:
    """The dispatch id of the call a pydantic-ai tool is answering: the key to dedupe effects on.

    Minted by the runtime and committed on the call's row before the body starts, the same on every
    attempt in any process. Raises ``DispatchIdUnavailableError`` outside the runtime (a plain
    ``agent.run``) or on the ``dbos_compat`` profile, which mints none.
    """
    found = ((ctx.metadata or {}).get(HELIX_KEY) or {}).get("dispatch_id")
    if not found:
        raise DispatchIdUnavailableError(
            f"tool {ctx.tool_name!r} asked for its dispatch id, but it is not running under helix_dbos "
            "with recovery='full' (no dispatch id was minted)"
        )
    return str(found)


class _AnyArgs(pydantic.BaseModel):
    """Placeholder input model: a toolset tool validates with its own validator, not this one."""

    model_config = pydantic.ConfigDict(extra="allow")


class _Checked:
    """Arguments the toolset's validator accepted, kept as the model sent them (what the ledger stores)."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    def model_dump(self, mode: str = "json") -> dict[str, Any]:
        return self.raw


@dataclass(frozen=True)
class ToolsetTool(Tool):
    """A tool a pydantic-ai toolset listed; its body is the toolset's ``call_tool``."""

    listed: Any = None  # pydantic_ai ToolsetTool
    toolset: Any = None  # the agent-level toolset that listed it (calls go through its wrappers)
    owner: Any = None  # the PydanticAgent
    origin: str = "function"  # function | mcp
    policy_source: str = "default"
    #: listed under an ``ApprovalRequiredToolset``: the runtime's gate, not the toolset, decides
    toolset_gated: bool = False

    def definition(self) -> ToolDefinition:
        # approval and client execution are the runtime's business: the model sees a plain function
        listed: ToolDefinition = self.listed.tool_def
        return replace(listed, kind="function", metadata=None)

    def validate(self, args: Any) -> Any:
        if isinstance(args, str):
            self.listed.args_validator.validate_json(args or "{}")
            return _Checked(json.loads(args or "{}"))
        raw = dict(args or {})
        self.listed.args_validator.validate_python(raw)
        return _Checked(raw)

    async def invoke(self, args: Any, ctx: ToolContext) -> Any:
        return await self.owner.call_tool(self, args.raw, ctx)


def _flag(value: Any, key: str, tool: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"tool {tool!r}: policy {key!r} must be true or false, not {value!r}")
    return value


def resolve_policy(
    tool_def: ToolDefinition, origin: str, override: Mapping[str, Any] | None, toolset_approval: ApprovalRule | None = None
) -> tuple[dict[str, Any], str]:
    """The recovery policy of one listed tool, and where it came from.

    Later sources win: the default (unsafe), pydantic-ai's flags (``sequential``, ``requires_approval``
    as kind ``unapproved`` or a wrapping ``ApprovalRequiredToolset``'s rule, ``external`` tools become
    client tools), an MCP server's annotations (``readOnlyHint`` or ``idempotentHint`` true -> safe),
    the tool's ``metadata`` keys, and last the per-agent mapping by tool name given to the runtime.
    """
    name = tool_def.name
    policy: dict[str, Any] = {
        "replay": "unsafe",
        "concurrency_group": None,
        "sequential": bool(tool_def.sequential),
        "requires_approval": toolset_approval if toolset_approval is not None else tool_def.kind == "unapproved",
        "client": tool_def.kind in ("external", "deferred"),
    }
    source = "default" if toolset_approval is None else "approval_toolset"
    metadata = dict(tool_def.metadata or {})
    if origin == "mcp":
        policy["replay"] = replay_from_annotations(metadata.get("annotations"))
        source = "mcp_annotations"
    own = {k: v for k, v in metadata.items() if k in POLICY_KEYS}
    for layer, label in ((own, "metadata"), (dict(override or {}), "mapping")):
        unknown = set(layer) - POLICY_KEYS
        if unknown:
            raise ConfigurationError(f"tool {name!r}: unknown policy keys {sorted(unknown)} (use {sorted(POLICY_KEYS)})")
        if not layer:
            continue
        source = label
        if "replay" in layer:
            if layer["replay"] not in ("safe", "unsafe"):
                raise ConfigurationError(f"tool {name!r}: replay must be 'safe' or 'unsafe', not {layer['replay']!r}")
            policy["replay"] = layer["replay"]
        if "concurrency_group" in layer:
            group = layer["concurrency_group"]
            if group is not None and not isinstance(group, str):
                raise ConfigurationError(f"tool {name!r}: concurrency_group must be a string")
            policy["concurrency_group"] = group
        for key in ("sequential", "requires_approval"):
            if key in layer:
                policy[key] = _flag(layer[key], key, name)
    if policy["client"]:
        policy["requires_approval"] = False
    return policy, source


Rule = tuple[Callable[[RunContext[Any], ToolDefinition, dict[str, Any]], bool], ToolDefinition]


def _has_approval(toolset: AbstractToolset[Any]) -> bool:
    from pydantic_ai.toolsets import ApprovalRequiredToolset, CombinedToolset, WrapperToolset

    if isinstance(toolset, ApprovalRequiredToolset):
        return True
    if isinstance(toolset, WrapperToolset):
        return _has_approval(toolset.wrapped)
    if isinstance(toolset, CombinedToolset):
        return any(_has_approval(t) for t in toolset.toolsets)
    return False


async def approval_rules(toolset: AbstractToolset[Any], ctx: RunContext[Any]) -> dict[str, list[Rule]]:
    """By the name the agent lists a tool under: the ``ApprovalRequiredToolset`` rules that wrap it.

    ``toolset.apply`` visits only leaves, so the wrapper tree is walked here; each approval wrapper
    lists its own tools (the names and definitions its rule is called with), and the prefixing and
    renaming wrappers above it map those names to the ones the model sees.
    """
    from pydantic_ai.toolsets import (
        ApprovalRequiredToolset,
        CombinedToolset,
        PrefixedToolset,
        RenamedToolset,
        WrapperToolset,
    )

    if isinstance(toolset, ApprovalRequiredToolset):
        rules = await approval_rules(toolset.wrapped, ctx)
        for name, listed in (await toolset.get_tools(ctx)).items():
            rules.setdefault(name, []).append((toolset.approval_required_func, listed.tool_def))
        return rules
    if isinstance(toolset, PrefixedToolset):
        return {f"{toolset.prefix}_{k}": v for k, v in (await approval_rules(toolset.wrapped, ctx)).items()}
    if isinstance(toolset, RenamedToolset):
        new_names = {v: k for k, v in toolset.name_map.items()}
        return {new_names.get(k, k): v for k, v in (await approval_rules(toolset.wrapped, ctx)).items()}
    if isinstance(toolset, WrapperToolset):
        return await approval_rules(toolset.wrapped, ctx)
    if isinstance(toolset, CombinedToolset):
        merged: dict[str, list[Rule]] = {}
        for child in toolset.toolsets:
            for k, v in (await approval_rules(child, ctx)).items():
                merged.setdefault(k, []).extend(v)
        return merged
    return {}


def _approval_rule(rules: list[Rule], ctx: RunContext[Any]) -> ApprovalRule:
    """The toolset's ``approval_required_func`` per call, asked with the run's ``RunContext`` when the
    call is planned (a rule that raises asks a human: ``planning._needs_approval``)."""

    def needs(args: dict[str, Any]) -> bool:
        return any(bool(func(ctx, tool_def, dict(args))) for func, tool_def in rules)

    return needs


def _is_mcp(toolset: AbstractToolset[Any]) -> bool:
    found: list[bool] = []

    def visit(leaf: AbstractToolset[Any]) -> None:
        found.append(type(leaf).__module__.startswith("pydantic_ai.mcp"))

    toolset.apply(visit)
    return any(found)


@dataclass
class PydanticAgent(Agent):
    """An ``hx.Agent`` read from a ``pydantic_ai.Agent``; build it with ``from_pydantic_ai``."""

    source: Any = None
    tool_policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    deps_factory: DepsFactory | None = None
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    system_prompts: tuple[str, ...] = ()
    usage_limits: UsageLimits | None = None
    #: ``ToolOutput(T, description=..., strict=...)``: the output tool's, as pydantic-ai sends them
    output_description: str | None = None
    output_strict: bool | None = None
    _listed: dict[int, dict[str, ToolsetTool]] = field(default_factory=dict, init=False, repr=False)
    _deps: RunDeps = field(default_factory=RunDeps, init=False, repr=False)
    _scopes: dict[str, RunScope] = field(default_factory=dict, init=False, repr=False)
    _catalog: dict[int, dict[str, ToolsetTool]] = field(default_factory=dict, init=False, repr=False)

    def uses_scope(self) -> bool:
        return True

    def output_tool_options(self) -> tuple[str | None, bool | None]:
        return self.output_description, self.output_strict

    # --- deps and RunContext ---------------------------------------------------------------------

    async def deps_for(self, scope: RunScope) -> Any:
        """The run's deps: the factory fed the stored JSON, once per run in this process."""
        return await self._deps.get(scope, self.deps_factory)

    async def run_context(self, scope: RunScope, call: ToolContext | None = None, approved: bool = False) -> RunContext[Any]:
        helix: dict[str, Any] = {"session_id": scope.session_id, "run_id": scope.run_id, "agent_name": self.name}
        extra: dict[str, Any] = {}
        if call is not None:
            helix.update(dispatch_id=call.dispatch_id, attempt=call.attempt, tool_call_id=call.tool_call_id)
            extra = {"tool_name": call.tool_name, "tool_call_id": call.tool_call_id, "retry": max(0, call.attempt - 1),
                     "tool_call_approved": approved}
        ctx = RunContext(
            deps=await self.deps_for(scope),
            model=self.resolved_model(),
            usage=RunUsage(),
            run_id=scope.run_id,
            conversation_id=scope.session_id,
            run_step=scope.step,
            metadata={HELIX_KEY: helix},
            model_settings=self.model_settings,
            agent=self.source,
            **extra,
        )
        base = getattr(self.source, "_metadata", None)
        if callable(base):  # Agent(metadata=fn): fn(ctx) with the run's deps, each time a context is built
            base = base(ctx)
        if base is None:
            return ctx
        if not isinstance(base, Mapping):
            raise ConfigurationError(f"agent {self.name!r}: metadata must be a dict (or a function returning one), not {type(base).__name__}")
        return replace(ctx, metadata={**base, HELIX_KEY: helix})

    # --- hooks the runtime calls -----------------------------------------------------------------

    async def refresh(self, scope: RunScope) -> None:
        """List every toolset for this run; a toolset that cannot list keeps what it listed before.

        A toolset never listed in this process (an MCP server down since launch) offers no tools:
        the model does not see them, and recovery treats their saved calls as calls of a removed
        tool (unsafe: ``outcome_unknown``), never as safe.
        """
        self._remember(scope)
        ctx = await self.run_context(scope)
        for index, toolset in enumerate(self.source.toolsets):
            try:
                self._listed[index] = await self._list(toolset, ctx)
            except Exception as exc:  # noqa: BLE001 keep the last good listing; say why in the log
                log.warning("agent %r: toolset %s could not list its tools: %s", self.name, toolset.label, exc)
        merged: dict[str, ToolsetTool] = {}
        for index in sorted(self._listed):
            for name, tool in self._listed[index].items():
                if name in merged:
                    raise ConfigurationError(f"agent {self.name!r}: two toolsets list a tool named {name!r}; prefix one")
                merged[name] = tool
        self.tools = list(merged.values())

    async def _list(self, toolset: AbstractToolset[Any], ctx: RunContext[Any]) -> dict[str, ToolsetTool]:
        """One toolset's tools, each with the policy it has now; raises what the listing raises."""
        listed = await asyncio.wait_for(toolset.get_tools(ctx), max(self.tool_timeout, LIST_TIMEOUT))
        origin = "mcp" if _is_mcp(toolset) else "function"
        gates = await approval_rules(toolset, ctx) if _has_approval(toolset) else {}
        tools: dict[str, ToolsetTool] = {}
        for name, listed_tool in listed.items():
            rule = _approval_rule(gates[name], ctx) if gates.get(name) else None
            policy, source = resolve_policy(listed_tool.tool_def, origin, self.tool_policies.get(name), rule)
            tools[name] = ToolsetTool(
                name=name,
                description=listed_tool.tool_def.description or "",
                input_model=_AnyArgs,
                execute=None if policy["client"] else _never,
                replay=policy["replay"],
                concurrency_group=policy["concurrency_group"],
                sequential=policy["sequential"],
                requires_approval=policy["requires_approval"],
                client=policy["client"],
                listed=listed_tool,
                toolset=toolset,
                owner=self,
                origin=origin,
                policy_source=source,
                toolset_gated=rule is not None,
            )
        return tools

    async def catalog(self) -> tuple[list[Tool], list[dict[str, str]]]:
        """Every tool the agent's toolsets list, with its policy, and the toolsets that could not list.

        For ``GET /agents``, before any run has listed them: each toolset is listed once with a
        ``RunContext`` of no run (``deps`` is ``None``, so a toolset whose listing needs a run's
        deps shows as not listed, with why) and kept, so an MCP server is not started again per
        read; one that failed is asked again at the next read. A run's own listing, when this
        process has one, is the one shown. What a run offers is never taken from here.
        """
        unlisted: list[dict[str, str]] = []
        try:
            ctx: RunContext[Any] | None = RunContext(
                deps=None, model=self.resolved_model(), usage=RunUsage(), metadata={HELIX_KEY: {"agent_name": self.name}},
                model_settings=self.model_settings, agent=self.source,
            )
        except Exception as exc:  # noqa: BLE001 the model cannot be built here: no toolset is listed, each says why
            ctx, reason = None, f"{type(exc).__name__}: {exc}"
        for index, toolset in enumerate(self.source.toolsets):
            if index in self._listed or index in self._catalog:
                continue
            if ctx is None:
                unlisted.append({"toolset": toolset.label, "error": reason})
                continue
            try:
                self._catalog[index] = await self._list(toolset, ctx)
            except Exception as exc:  # noqa: BLE001 shown to the operator as "could not be listed", with why
                unlisted.append({"toolset": toolset.label, "error": f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__})
        merged: dict[str, Tool] = {}
        for index in range(len(self.source.toolsets)):
            merged.update(self._listed.get(index, self._catalog.get(index, {})))
        return [*merged.values()], unlisted

    def _remember(self, scope: RunScope) -> None:
        if len(self._scopes) > 256:
            self._scopes.pop(next(iter(self._scopes)))
        self._scopes[scope.run_id] = scope

    async def instructions_for(self, scope: RunScope) -> str | None:
        from pydantic_ai._instructions import resolve_sourced_instructions

        ctx = await self.run_context(scope)
        parts = await home.at_home(scope.session_id, resolve_sourced_instructions(self.source._get_instructions(), ctx))
        texts = [*self.system_prompts, *(p.content for p in parts if p.content)]
        return "\n\n".join(texts) or None

    async def review_plan(self, planned: list[dict[str, Any]], scope: RunScope) -> list[dict[str, Any]]:
        """Output validators, on the validated structured output, inside the model step (recorded)."""
        validators = list(getattr(self.source, "_output_validators", []) or [])
        if not validators:
            return planned
        ctx = await self.run_context(scope)
        out: list[dict[str, Any]] = []
        for p in planned:
            if p["kind"] == "finish" and p["status"] == "ok":
                try:
                    value = self.validate_output(p["args"])
                    for v in validators:
                        value = await home.at_home(scope.session_id, v.validate(value, ctx))
                    p = {**p, "result": self.dump_output(value)}
                except ModelRetry as exc:
                    p = {**p, "kind": "invalid", "status": "error", "paired_by": "validation", "result": None,
                         "error": {"code": "output_rejected", "message": str(exc.message)}}
            out.append(p)
        return out

    async def call_tool(self, tool: ToolsetTool, raw: dict[str, Any], call: ToolContext) -> Any:
        """One body: the toolset's own ``call_tool``, bounded by ``tool_timeout`` so a server that
        dies or never answers gives the model a typed error instead of hanging the run."""
        scope = self._scopes.get(call.run_id) or RunScope(call.session_id, call.run_id)
        # A body runs only past the runtime's gate: a human approved it, or the gate (asking the
        # toolset's own rule, unless the policy overrode it) found it needs no approval. Either way
        # an ApprovalRequiredToolset must let the call through rather than defer it again.
        approved = call.approved is True or (tool.toolset_gated and not tool.needs_approval(raw))
        ctx = await self.run_context(scope, call, approved=approved)
        args = tool.listed.args_validator.validate_python(raw)
        try:
            if tool.listed.args_validator_func is not None:  # a tool's args_validator=: ModelRetry goes to the model
                checked = tool.listed.args_validator_func(ctx, **args)
                if inspect.isawaitable(checked):
                    await checked
            body = tool.toolset.call_tool(tool.name, args, ctx, tool.listed)
            if tool.origin == "function":  # an MCP client's session belongs to the loop that opened it
                body = home.at_home(call.session_id, body)
            value = await asyncio.wait_for(body, self.tool_timeout)
            # a ToolReturn's extra content for the model has no place in a call's answer: its value does
            return value.return_value if isinstance(value, ToolReturn) else value
        except (CallDeferred, ApprovalRequired) as exc:
            raise UnsupportedFeatureError(
                f"tool {tool.name!r} raised {type(exc).__name__} inside its body; declare the policy instead "
                "(requires_approval=True, or an external toolset for a client tool)"
            ) from exc
        except TimeoutError:
            raise ToolTimeoutError(f"tool {tool.name!r} gave no answer within {self.tool_timeout:g} s") from None
        except ModelRetry as exc:
            # pydantic-ai's MCP client reports a dropped connection as a retry; it is the server, not the call
            if tool.origin == "mcp" and "connection closed" in str(exc.message).lower():
                raise ToolServerError(f"tool {tool.name!r}: its MCP server is unavailable (connection closed mid-call)") from exc
            raise
        except ToolTimeoutError:
            raise
        except Exception as exc:
            if tool.origin == "mcp" and _looks_like_transport(exc):
                raise ToolServerError(f"tool {tool.name!r}: its MCP server is unavailable ({type(exc).__name__}: {exc})") from exc
            raise


def _never(*_: Any, **__: Any) -> Any:  # pragma: no cover - ToolsetTool.invoke never calls execute
    raise AssertionError("a toolset tool runs through its toolset")


def _max_steps(usage_limits: UsageLimits | None, max_steps: int | None, name: str) -> int:
    """``request_limit`` is the run's ``max_steps``; token and tool-call limits are checked in each
    model step (``runtime/flow/model_request.check_usage_limits``)."""
    if usage_limits is None:
        return max_steps or 50
    return usage_limits.request_limit or max_steps or 50


def _model_of(agent: PydanticAIAgent[Any, Any]) -> Any:
    """The agent's model, or the one ``agent.override(model=...)`` puts in place while it is read.

    Read once, when the runtime is built: an override active then is the model of every run the
    runtime makes (the test idiom ``with agent.override(model=TestModel()): hx.Runtime(...)``).
    """
    override = getattr(agent, "_override_model", None)
    active = override.get() if override is not None else None
    return active.value if active is not None else agent.model


def from_pydantic_ai(
    agent: PydanticAIAgent[Any, Any],
    *,
    name: str | None = None,
    tool_policies: ToolPolicies | None = None,
    deps_factory: DepsFactory | None = None,
    usage_limits: UsageLimits | None = None,
    max_steps: int | None = None,
    tool_timeout: float | None = None,
    sub_agents: list[SubAgent] | None = None,
    model_retries: ModelRetries | None = None,
) -> PydanticAgent:
    """Read a pydantic-ai agent into an ``hx.Agent``; refuses what the runtime cannot honour.

    ``tool_policies`` maps a tool name to policy keys (``replay``, ``concurrency_group``,
    ``sequential``, ``requires_approval``) and wins over everything the tool says itself.
    ``deps_factory(deps_input)`` rebuilds ``RunContext.deps`` from the JSON a run was started with
    (``runtime.start(..., deps=...)``), in whichever process runs the step; without one, ``deps``
    is that JSON as stored. ``sub_agents``: ``hx.remote_agent``/``hx.companion_agent`` children,
    offered beside the agent's own tools. ``model_retries``: the model request step's retry budget
    (default: ``1 + model_settings["max_retries"]`` requests when the agent's settings say, else 4).
    """
    if not isinstance(agent, PydanticAIAgent):
        raise ConfigurationError(f"from_pydantic_ai needs a pydantic_ai.Agent, not {type(agent).__name__}")
    agent_name = name or infer_agent_name(agent)
    model = _model_of(agent)
    if model is None:
        raise ConfigurationError(f"agent {agent_name!r} has no model; give Agent(model=...) (a run cannot choose one)")
    if getattr(agent, "_system_prompt_functions", None) or getattr(agent, "_system_prompt_dynamic_functions", None):
        raise UnsupportedFeatureError(
            f"agent {agent_name!r}: @agent.system_prompt functions are not supported; use @agent.instructions "
            "(rendered for every model request)"
        )
    from_capabilities = check_capabilities(agent, agent_name)
    settings = agent.model_settings
    if settings is not None and not isinstance(settings, dict):
        raise UnsupportedFeatureError(f"agent {agent_name!r}: model_settings must be a dict, not a {type(settings).__name__}")
    if from_capabilities:  # capabilities' settings go on top of the agent's, as pydantic-ai merges them
        from pydantic_ai.settings import merge_model_settings

        settings = merge_model_settings(settings, cast("ModelSettings", from_capabilities))
    declared = getattr(agent, "_output_type", str)
    output_type = read_output_type(declared, agent_name)
    from pydantic_ai.output import ToolOutput

    tool_output = declared if isinstance(declared, ToolOutput) else None
    if getattr(agent, "_output_validators", None) and output_type is None:
        raise UnsupportedFeatureError(
            f"agent {agent_name!r}: output validators on text output are not supported; give a structured output_type"
        )
    timeout = tool_timeout or getattr(agent, "_tool_timeout", None) or DEFAULT_TOOL_TIMEOUT
    return PydanticAgent(
        name=agent_name,
        model=model,
        instructions=None,
        output_type=output_type,
        max_steps=_max_steps(usage_limits, max_steps, agent_name),
        model_settings=settings,
        source=agent,
        tool_policies={k: dict(v) for k, v in (tool_policies or {}).items()},
        deps_factory=deps_factory,
        tool_timeout=float(timeout),
        system_prompts=tuple(getattr(agent, "_system_prompts", ()) or ()),
        sub_agents=list(sub_agents or []),
        usage_limits=usage_limits,
        output_retries=int(getattr(agent, "_max_output_retries", 1)),  # retries= / output_retries=, resolved by pydantic-ai
        model_retries=model_retries,
        output_description=tool_output.description if tool_output is not None else None,
        output_strict=tool_output.strict if tool_output is not None else None,
    )
