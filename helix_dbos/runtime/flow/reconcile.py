"""Asking a tool's reconcile check whether a call's effect happened, bounded and never raising.

The check talks to the outside system, which may be down or slow: anything but a clear answer
(an exception, a timeout, a value that is not ``Applied``/``NotApplied``/``None``, a result that is
not JSON) counts as "cannot tell", so the call stays ``outcome_unknown`` exactly as without a check.
The verdict is plain JSON because it is committed to the call's row before anything acts on it.

Every entry that would answer a started call ``outcome_unknown`` asks first: the attempt gate of a
recovering run (a wake, ``resume``, ``retry``), a redirect before its pairing transaction, a failing
run before its failure transaction. Each verdict is one short ledger transaction of its own
(``gate.record_check``, fenced by the run and by the attempt number), so a replay reads it
from the row instead of asking again; a verdict is a ledger fact, not a DBOS step.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from ...definitions import Applied, CheckContext, NotApplied, Tool
from ...ledger.records import CheckVerdict
from ...threads import in_daemon_thread
from ..floor import gate, transcript
from ..floor.durable import plain_tx
from ..floor.records import CheckRequest, CheckTarget
from ..floor.registry import Env, Registry
from ..process.faults import crash_point

log = logging.getLogger("helix_dbos")


async def _call(tool: Tool, ctx: CheckContext) -> Any:
    check = tool.reconcile
    assert check is not None
    if inspect.iscoroutinefunction(check):
        return await check(ctx)
    value = await in_daemon_thread(check, ctx, name=f"helix-check-{tool.name}")  # a check stuck for ever never holds the exit
    return await value if inspect.isawaitable(value) else value


async def ask(tool: Tool, ctx: CheckContext) -> CheckVerdict:
    """``{"verdict": "applied", "result": ...}``, ``{"verdict": "not_applied"}`` or
    ``{"verdict": "unknown", "reason": ...}``. A sync check that times out keeps its (daemon) thread
    until it returns or the process exits; its answer is then ignored (``helix_dbos/threads.py``)."""
    try:
        value = await asyncio.wait_for(_call(tool, ctx), timeout=tool.reconcile_timeout)
    except TimeoutError:
        return {"verdict": "unknown", "reason": f"the check timed out after {tool.reconcile_timeout:g} s"}
    except Exception as exc:
        log.warning("the reconcile check of tool %r raised; the call stays in doubt", tool.name, exc_info=True)
        return {"verdict": "unknown", "reason": f"the check raised {type(exc).__name__}: {exc}"}
    if isinstance(value, Applied):
        ok, result = transcript.jsonable(value.result)
        if not ok:
            return {"verdict": "unknown", "reason": f"the check said applied, but its result is unusable: {result}"}
        return {"verdict": "applied", "result": result}
    if isinstance(value, NotApplied):
        return {"verdict": "not_applied"}
    if value is None:
        return {"verdict": "unknown", "reason": "the check could not tell (returned None)"}
    return {"verdict": "unknown", "reason": f"the check returned {type(value).__name__}, not Applied, NotApplied or None"}


async def ask_and_record(registry: Registry, run_id: str, dispatch_id: str, request: CheckRequest) -> None:
    """Ask the call's reconcile check and commit its verdict (a tool removed meanwhile cannot tell).

    ``request`` names the call as a gate or a reading of the step gave it: ``agent_name``,
    ``tool_name``, ``session_id``, ``args`` and ``attempts`` (the attempt the verdict is about).
    """
    tool = registry.env.agent(request["agent_name"]).tool(request["tool_name"])
    if tool is None or tool.reconcile is None:
        verdict: CheckVerdict = {"verdict": "unknown", "reason": "the tool or its check is no longer defined"}
    else:
        ctx = CheckContext(session_id=request["session_id"], dispatch_id=dispatch_id, tool_name=tool.name,
                           args=request["args"], attempts=request["attempts"], run_id=run_id)
        verdict = await ask(tool, ctx)
    crash_point("after_check", request["tool_name"])
    if not registry.lock_held():  # a process that lost its executor id records no verdict
        await asyncio.to_thread(registry.wait_lock_held)
    await plain_tx(gate.record_check, run_id, dispatch_id, request["attempts"], verdict)


async def ask_before(registry: Registry, run_id: str, read: Callable[[sa.Connection, Env, str], list[CheckTarget]]) -> int:
    """Ask, side by side, every check ``read`` (a fenced ledger read) lists, and record each verdict;
    the number asked. The entry's own transaction then pairs by the recorded verdicts."""
    wanted: list[CheckTarget] = await plain_tx(read, registry.env, run_id)
    await asyncio.gather(*(ask_and_record(registry, run_id, w["dispatch_id"], w) for w in wanted))
    return len(wanted)
