"""The ``RunScope`` an agent's per-run hooks get, and the deps input it carries.

A session's deps input is JSON stored in the same transaction that admits the run that brought it
(``start(..., deps=...)``), so a recovered run in a fresh process reads exactly what its start
stored and rebuilds its deps with the agent's factory. Runs that bring none keep the session's.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ...definitions import Agent
from ...definitions.context import RunScope
from ...errors import ValidationError
from ...ledger import rows, session_deps
from ..floor import fence, transcript
from ..floor.durable import plain_tx


def store_deps(conn: sa.Connection, session_id: str, run_id: str, deps: Any) -> None:
    """Record a session's deps input (JSON only: a deps object is rebuilt by the factory, never pickled)."""
    ok, value = transcript.jsonable(deps)
    if not ok:
        raise ValidationError(f"deps must be JSON (the factory rebuilds the object in any process): {value}")
    row = {"session_id": session_id, "data": value, "run_id": run_id, "updated_at": rows.now()}
    session_deps.put(conn, session_id, row)


def read_deps(conn: sa.Connection, run_id: str, session_id: str) -> Any:
    fence.check(conn, run_id, "deps read")
    return session_deps.data_of(conn, session_id)


async def scope_of(agent: Agent, run_id: str, session_id: str, step: int = 0) -> RunScope:
    """The scope for ``agent``'s hooks; plain ``hx.Agent``s need no deps read."""
    if not agent.uses_scope():
        return RunScope(session_id, run_id, step)
    return RunScope(session_id, run_id, step, await plain_tx(read_deps, run_id, session_id))
