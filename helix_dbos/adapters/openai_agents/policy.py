"""What recovery needs to know about an OpenAI Agents SDK tool, and the call a tool body is answering.

The SDK's ``FunctionTool`` says nothing about replay: it has no metadata field and is unhashable
(so no weak map can hold a policy beside it). A tool's own declaration is an attribute set by
``openai_policy`` on the tool object, read from the object ``Agent.get_all_tools`` returns (the same
object the app built). The body's link to its helix call is a ``ContextVar``: the SDK's
``ToolContext`` has no metadata dict, and a context variable follows the body into the worker
thread a sync ``@function_tool`` runs in (``asyncio.to_thread`` copies the context).

This module imports no SDK: an app declares policies and reads dispatch ids with the SDK loaded by
itself, and ``import helix_dbos`` never loads it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from ...definitions.context import ToolContext
from ...definitions.reconcile import ReconcileCheck
from ...errors import ConfigurationError, DispatchIdUnavailableError

#: The attribute ``openai_policy`` sets on a tool object.
POLICY_ATTR = "__helix_policy__"
#: Keys a tool may declare: the shared policy keys, plus a reconcile check and its bound.
TOOL_POLICY_KEYS = frozenset({"replay", "concurrency_group", "sequential", "requires_approval", "reconcile", "reconcile_timeout"})

T = TypeVar("T")

#: The helix call a tool body is answering, set around the body by the adapter's tool.
CURRENT_CALL: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar("helix_openai_call", default=None)


def _checked(policy: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = set(policy) - TOOL_POLICY_KEYS
    if unknown:
        raise ConfigurationError(f"{where}: unknown policy keys {sorted(unknown)} (use {sorted(TOOL_POLICY_KEYS)})")
    out = dict(policy)
    if "replay" in out and out["replay"] not in ("safe", "unsafe"):
        raise ConfigurationError(f"{where}: replay must be 'safe' or 'unsafe', not {out['replay']!r}")
    group = out.get("concurrency_group")
    if group is not None and not isinstance(group, str):
        raise ConfigurationError(f"{where}: concurrency_group must be a string")
    for key in ("sequential", "requires_approval"):
        if key in out and not isinstance(out[key], bool):
            raise ConfigurationError(f"{where}: policy {key!r} must be true or false, not {out[key]!r}")
    if out.get("reconcile") is not None and not callable(out["reconcile"]):
        raise ConfigurationError(f"{where}: reconcile must be a callable check(ctx)")
    return out


@overload
def openai_policy(tool: T, /, **policy: Any) -> T: ...
@overload
def openai_policy(**policy: Any) -> Callable[[T], T]: ...
def openai_policy(tool: Any = None, /, **policy: Any) -> Any:
    """Declare an SDK tool's recovery policy: ``openai_policy(tool, replay="safe")``, or as a
    decorator above ``@function_tool``; the tool is returned as it is, marked.

    Keys: ``replay`` (``"unsafe"`` by default: a body that may have run is never run again, the
    model is told ``outcome_unknown``), ``concurrency_group``, ``sequential``, ``requires_approval``,
    ``reconcile`` (a ``check(ctx)`` recovery asks before answering ``outcome_unknown``) and
    ``reconcile_timeout``. ``Runtime(tool_policies=...)`` still wins over what the tool says.
    """
    checked = _checked(policy, "openai_policy")

    def mark(target: T) -> T:
        try:
            setattr(target, POLICY_ATTR, {**dict(getattr(target, POLICY_ATTR, None) or {}), **checked})
        except (AttributeError, TypeError) as exc:
            raise ConfigurationError(f"openai_policy: cannot mark {target!r:.80} ({type(target).__name__})") from exc
        return target

    return mark if tool is None else mark(tool)


def declared(tool: object) -> dict[str, Any]:
    """What a tool object declares of itself (``openai_policy``), checked."""
    own = getattr(tool, POLICY_ATTR, None) or {}
    return _checked(own, f"tool {getattr(tool, 'name', tool)!r}") if own else {}


def checked_mapping(policy: Mapping[str, Any] | None, tool_name: str) -> dict[str, Any]:
    """One tool's entry in ``Runtime(tool_policies=...)``, checked."""
    return _checked(policy or {}, f"tool {tool_name!r}") if policy else {}


def openai_tool_context(ctx: object = None) -> ToolContext:
    """The helix call the running SDK tool body answers (its dispatch id, attempt, session, run).

    ``ctx`` (the SDK's ``ToolContext``) is optional; given, its ``tool_call_id`` must be the call's.
    Raises ``DispatchIdUnavailableError`` outside helix (a plain ``Runner.run``)."""
    call = CURRENT_CALL.get()
    if call is None:
        raise DispatchIdUnavailableError("an OpenAI Agents SDK tool asked for its helix call, but it is not running under helix_dbos")
    given = getattr(ctx, "tool_call_id", None)
    if ctx is not None and given is not None and call.tool_call_id is not None and given != call.tool_call_id:
        raise DispatchIdUnavailableError(f"the tool context's call {given!r} is not the call this body answers ({call.tool_call_id!r})")
    return call


def openai_dispatch_id(ctx: object = None) -> str:
    """The dispatch id of the call an SDK tool body is answering: the key to dedupe effects on.

    Minted by the runtime and committed on the call's row before the body starts, the same on every
    attempt in any process. Raises ``DispatchIdUnavailableError`` outside helix or on the
    ``dbos_compat`` profile, which mints none."""
    return openai_tool_context(ctx).require_dispatch_id()


__all__ = ["CURRENT_CALL", "POLICY_ATTR", "TOOL_POLICY_KEYS", "ReconcileCheck", "openai_dispatch_id", "openai_policy", "openai_tool_context"]
