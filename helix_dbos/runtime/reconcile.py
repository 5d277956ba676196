"""Asking a tool's reconcile check whether a call's effect happened, bounded and never raising.

The check talks to the outside system, which may be down or slow: anything but a clear answer
(an exception, a timeout, a value that is not ``Applied``/``NotApplied``/``None``, a result that is
not JSON) counts as "cannot tell", so the call stays ``outcome_unknown`` exactly as without a check.
The verdict is plain JSON because it is committed to the call's row before anything acts on it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from ..definitions import Applied, CheckContext, NotApplied, Tool
from . import transcript


async def _call(tool: Tool, ctx: CheckContext) -> Any:
    check = tool.reconcile
    assert check is not None
    if inspect.iscoroutinefunction(check):
        return await check(ctx)
    value = await asyncio.to_thread(check, ctx)
    return await value if inspect.isawaitable(value) else value


async def ask(tool: Tool, ctx: CheckContext) -> dict[str, Any]:
    """``{"verdict": "applied", "result": ...}``, ``{"verdict": "not_applied"}`` or
    ``{"verdict": "unknown", "reason": ...}``. A sync check that times out keeps its worker thread
    until it returns; its answer is then ignored."""
    try:
        value = await asyncio.wait_for(_call(tool, ctx), timeout=tool.reconcile_timeout)
    except TimeoutError:
        return {"verdict": "unknown", "reason": f"the check timed out after {tool.reconcile_timeout:g} s"}
    except Exception as exc:  # a check that fails cannot tell: the call stays in doubt
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
