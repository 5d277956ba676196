"""Tools: a Python function plus what recovery needs to know about it.

The input schema is a pydantic model, derived from the function's type hints (``@tool``) or given
(``define_tool``); the model sees its JSON schema and every argument is validated against it before
a body starts, and again at recovery, so a deploy that changed the schema makes recovery more
careful, never less.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_type_hints, overload

import pydantic

from ..errors import ConfigurationError
from ..ledger.statuses import ReplayPolicy
from ..sql_kinds import SQL_OPT_INS, normalized
from ..threads import in_daemon_thread
from . import home
from .context import ToolContext
from .reconcile import ReconcileCheck

if TYPE_CHECKING:  # pydantic-ai loads when a run first asks a model, not when tools are defined
    from pydantic_ai.tools import ToolDefinition

ApprovalRule = bool | Callable[[dict[str, Any]], bool]
#: Seconds a ``reconcile`` check may take before recovery counts it as "cannot tell".
DEFAULT_RECONCILE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Tool:
    """A tool definition. Build one with ``@hx.tool``, ``hx.define_tool`` or ``hx.client_tool``."""

    name: str
    description: str
    input_model: type[pydantic.BaseModel]
    execute: Callable[..., Any] | None
    replay: ReplayPolicy = "unsafe"
    concurrency_group: str | None = None
    sequential: bool = False
    requires_approval: ApprovalRule = False
    client: bool = False
    takes_ctx: bool = False
    unpack_args: bool = True
    strict: bool | None = None
    transactional: bool = False
    reconcile: ReconcileCheck | None = None
    reconcile_timeout: float = DEFAULT_RECONCILE_TIMEOUT
    #: The DDL kinds a transactional body may run besides queries and DML (``sql_kinds.SQL_OPT_INS``).
    sql_allows: frozenset[str] = frozenset()
    _schema: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.replay not in ("safe", "unsafe"):
            raise ConfigurationError(f"tool {self.name!r}: replay must be 'safe' or 'unsafe', not {self.replay!r}")
        if self.client and self.requires_approval:
            raise ConfigurationError(f"tool {self.name!r}: a client tool cannot also require approval")
        self._check_recovery_options()
        object.__setattr__(self, "_schema", self.input_model.model_json_schema())

    def _check_recovery_options(self) -> None:
        """Refuse combinations whose promise the runtime could not keep, at definition time."""
        if self.sql_allows:
            kinds = frozenset(normalized(k) for k in self.sql_allows)
            if not self.transactional:
                raise ConfigurationError(f"tool {self.name!r}: sql_allows is for a transactional tool (its body's SQL on ctx.connection)")
            unknown = sorted(kinds - SQL_OPT_INS)
            if unknown:
                raise ConfigurationError(
                    f"tool {self.name!r}: sql_allows names {', '.join(unknown)}; a transactional body may opt into {', '.join(sorted(SQL_OPT_INS))} only"
                )
            object.__setattr__(self, "sql_allows", kinds)
        if self.transactional:
            if self.client:
                raise ConfigurationError(f"tool {self.name!r}: a client tool cannot be transactional")
            if self.reconcile is not None:
                raise ConfigurationError(f"tool {self.name!r}: a transactional tool needs no reconcile check (its result commits with its writes)")
            if self.execute is not None and inspect.iscoroutinefunction(self.execute):
                # The body runs on the ledger's blocking connection, inside one database transaction,
                # in a worker thread; an async body would need an async connection the runtime does not have.
                raise ConfigurationError(
                    f"tool {self.name!r}: a transactional body must be a plain (sync) function; it runs in a worker thread on ctx.connection"
                )
        if self.reconcile is not None:
            if self.client:
                raise ConfigurationError(f"tool {self.name!r}: a client tool cannot have a reconcile check")
            if not callable(self.reconcile):
                raise ConfigurationError(f"tool {self.name!r}: reconcile must be a callable check(ctx)")
        if not self.reconcile_timeout > 0:
            raise ConfigurationError(f"tool {self.name!r}: reconcile_timeout must be positive, not {self.reconcile_timeout!r}")

    @property
    def kind(self) -> Literal["client", "tool"]:
        return "client" if self.client else "tool"

    def definition(self) -> ToolDefinition:
        from pydantic_ai.tools import ToolDefinition

        return ToolDefinition(
            name=self.name, description=self.description, parameters_json_schema=self._schema, strict=self.strict
        )

    def validate(self, args: Any) -> pydantic.BaseModel:
        """Parse arguments (a dict or a JSON string); raises ``pydantic.ValidationError``."""
        if isinstance(args, str):
            return self.input_model.model_validate_json(args or "{}")
        return self.input_model.model_validate(args or {})

    def accepts(self, args: Any) -> bool:
        try:
            self.validate(args)
        except pydantic.ValidationError:
            return False
        return True

    def needs_approval(self, args: dict[str, Any]) -> bool:
        rule = self.requires_approval
        return bool(rule(args)) if callable(rule) else bool(rule)

    def _body(self) -> Callable[..., Any]:
        if self.execute is None:
            raise ConfigurationError(f"tool {self.name!r} is executed by the client, not the runtime")
        return self.execute

    def _call_args(self, args: pydantic.BaseModel, ctx: ToolContext) -> tuple[list[Any], dict[str, Any]]:
        self._body()
        positional: list[Any] = [ctx] if self.takes_ctx else []
        if self.unpack_args:
            return positional, {name: getattr(args, name) for name in type(args).model_fields}
        positional.append(args)
        return positional, {}

    def invoke_sync(self, args: pydantic.BaseModel, ctx: ToolContext) -> Any:
        """Run a transactional body in the calling thread (which holds the transaction)."""
        positional, kwargs = self._call_args(args, ctx)
        result = self._body()(*positional, **kwargs)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise ConfigurationError(f"tool {self.name!r}: a transactional body returned an awaitable; it must be sync")
        return result

    async def invoke(self, args: pydantic.BaseModel, ctx: ToolContext) -> Any:
        """Run the body; sync bodies go to a worker thread so they never block the DBOS loop."""
        positional, kwargs = self._call_args(args, ctx)
        body = self._body()
        if inspect.iscoroutinefunction(body):  # on the caller's thread when it serves the run (``home``)
            return await home.at_home(ctx.session_id, body(*positional, **kwargs))
        # a daemon thread: a body stuck for ever never holds the process's exit (``threads.py``)
        result = await in_daemon_thread(functools.partial(body, *positional, **kwargs), name=f"helix-body-{self.name}")
        if inspect.isawaitable(result):
            return await result
        return result


def _model_from_signature(fn: Callable[..., Any], name: str) -> tuple[type[pydantic.BaseModel], bool]:
    """A pydantic model of ``fn``'s parameters (minus a leading ``ToolContext``), and whether it takes ctx."""
    sig = inspect.signature(fn)
    hints = get_type_hints(fn, include_extras=True)
    params = list(sig.parameters.values())
    takes_ctx = bool(params) and (hints.get(params[0].name) is ToolContext or params[0].name == "ctx")
    if takes_ctx:
        params = params[1:]
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ConfigurationError(f"tool {name!r}: *args/**kwargs cannot be described to a model")
        annotation = hints.get(p.name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, default)
    model = pydantic.create_model(f"{name}_args", **fields)
    return model, takes_ctx


def _describe(fn: Callable[..., Any]) -> str:
    return inspect.cleandoc(fn.__doc__ or "").strip()


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    replay: ReplayPolicy = "unsafe",
    concurrency_group: str | None = None,
    sequential: bool = False,
    requires_approval: ApprovalRule = False,
    strict: bool | None = None,
    transactional: bool = False,
    reconcile: ReconcileCheck | None = None,
    reconcile_timeout: float = DEFAULT_RECONCILE_TIMEOUT,
    sql_allows: Iterable[str] = (),
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    replay: ReplayPolicy = "unsafe",
    concurrency_group: str | None = None,
    sequential: bool = False,
    requires_approval: ApprovalRule = False,
    strict: bool | None = None,
    transactional: bool = False,
    reconcile: ReconcileCheck | None = None,
    reconcile_timeout: float = DEFAULT_RECONCILE_TIMEOUT,
    sql_allows: Iterable[str] = (),
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a tool of a function; its type hints are the input schema and its docstring the description.

    ``replay="unsafe"`` (the default) means a body that may have run is never run again: recovery
    tells the model ``outcome_unknown``. Mark ``replay="safe"`` only when two overlapping attempts
    leave the same result as one (an upsert, a read, a call keyed on ``ctx.dispatch_id``).

    ``transactional=True``: a sync body that writes only through ``ctx.connection`` (tables in the
    ledger's database); its writes commit with its result, so it is exactly once and never in doubt.
    ``reconcile=check``: recovery asks ``check(ctx)`` before answering a call ``outcome_unknown``; it
    returns ``hx.Applied(result)``, ``hx.NotApplied()`` or ``None`` within ``reconcile_timeout`` s.
    ``sql_allows``: the DDL kinds a transactional body may run on its own tables besides queries and
    DML (``"CREATE TABLE"``, ``"CREATE INDEX"``, ``"ALTER TABLE"``...). See docs/writing-tools.md.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        tool_name = name or f.__name__
        model, takes_ctx = _model_from_signature(f, tool_name)
        return Tool(
            name=tool_name,
            description=description if description is not None else _describe(f),
            input_model=model,
            execute=f,
            replay=replay,
            concurrency_group=concurrency_group,
            sequential=sequential,
            requires_approval=requires_approval,
            takes_ctx=takes_ctx,
            strict=strict,
            transactional=transactional,
            reconcile=reconcile,
            reconcile_timeout=reconcile_timeout,
            sql_allows=frozenset(sql_allows),
        )

    return wrap(fn) if fn is not None else wrap


def define_tool(
    *,
    name: str,
    description: str,
    input_schema: type[pydantic.BaseModel],
    execute: Callable[[pydantic.BaseModel, ToolContext], Any | Awaitable[Any]],
    replay: ReplayPolicy = "unsafe",
    concurrency_group: str | None = None,
    sequential: bool = False,
    requires_approval: ApprovalRule = False,
    strict: bool | None = None,
    transactional: bool = False,
    reconcile: ReconcileCheck | None = None,
    reconcile_timeout: float = DEFAULT_RECONCILE_TIMEOUT,
    sql_allows: Iterable[str] = (),
) -> Tool:
    """A tool with an explicit pydantic input schema; ``execute(args, ctx)`` gets the validated model.

    ``transactional``, ``reconcile`` and ``sql_allows`` as for ``@tool``.
    """

    def call(ctx: ToolContext, args: pydantic.BaseModel) -> Any:
        return execute(args, ctx)

    async def acall(ctx: ToolContext, args: pydantic.BaseModel) -> Any:
        return await execute(args, ctx)

    return Tool(
        name=name,
        description=description,
        input_model=input_schema,
        execute=acall if inspect.iscoroutinefunction(execute) else call,
        replay=replay,
        concurrency_group=concurrency_group,
        sequential=sequential,
        requires_approval=requires_approval,
        takes_ctx=True,
        unpack_args=False,
        strict=strict,
        transactional=transactional,
        reconcile=reconcile,
        reconcile_timeout=reconcile_timeout,
        sql_allows=frozenset(sql_allows),
    )


def client_tool(*, name: str, description: str, input_schema: type[pydantic.BaseModel]) -> Tool:
    """A tool the client executes: the run suspends until ``runtime.submit_tool_result`` answers it."""
    return Tool(name=name, description=description, input_model=input_schema, execute=None, client=True)
