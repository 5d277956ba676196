"""A transactional tool's body and its result in one database transaction: exactly once, never in doubt.

The attempt row is committed first, apart, by the attempt gate: a marker that counts the body toward
the 3-body limit and carries no effect. Then one transaction on the ledger's engine: the run fence,
the call's row locked (Postgres ``FOR UPDATE``; SQLite holds its single write lock from ``BEGIN
IMMEDIATE``), the body writing through ``ctx.connection``, the result write fenced by the attempt
number, commit. A crash anywhere before the commit rolls the body's writes back with the missing
result; a refused result write (a newer attempt, a lost session) rolls them back too. A body that
raises is rolled back and its error is written in a transaction of its own; a transient store
error (an outage) is not the body's error and is raised as it is.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, cast

import pydantic
import sqlalchemy as sa

from ...definitions import Tool, ToolContext
from ...ledger import attempts, store
from ..floor import fence, transcript
from ..floor import gate as attempt_gate
from ..floor.records import RecordOutcome
from ..floor.registry import env
from ..floor.store_retry import is_transient
from ..process.faults import crash_point

log = logging.getLogger("helix_dbos")


class _Refused(Exception):
    """The result write may not happen: roll the body's writes back with it."""


class _Unusable(Exception):
    """The body returned a value that cannot be a result: roll back, answer the call with an error."""


def _body_and_result(conn: sa.Connection, run_id: str, dispatch_id: str, attempt: int, tool: Tool, args: pydantic.BaseModel, ctx: ToolContext) -> RecordOutcome:
    reason, _ = fence.why_refused(conn, run_id, fence.current_workflow_id())
    if reason is not None:
        raise _Refused(f"result write refused: {reason}")
    call = store.get_call(conn, dispatch_id, for_update=True)
    if call is None or call["status"] != "running" or call["attempts"] != attempt:
        raise _Refused("result write refused: a newer attempt or an answer owns the call")
    value = tool.invoke_sync(args, dataclasses.replace(ctx, connection=conn))
    ok, value = transcript.jsonable(value)
    if not ok:
        raise _Unusable(value)
    crash_point("after_body", tool.name)  # dies with the transaction open: the body's writes never commit
    if not attempts.record_result(conn, dispatch_id, attempt, run_id, "ok", result=value):
        raise _Refused("result write refused: a newer attempt or an answer owns the call")
    return {"status": "ok", "written": True}


def run(run_id: str, dispatch_id: str, attempt: int, tool: Tool, raw_args: Any, ctx: ToolContext) -> RecordOutcome:
    """Blocking (a worker thread): the body and its result commit together or not at all."""
    engine = env().engine
    try:
        args = tool.validate(raw_args)
        with engine.begin() as conn:
            return _body_and_result(conn, run_id, dispatch_id, attempt, tool, args, ctx)
    except _Refused as refused:
        with engine.begin() as conn:
            attempts.refuse_attempt(conn, dispatch_id, attempt)
        return {"status": "refused", "written": False, "refused": str(refused)}
    except _Unusable as unusable:
        error = {"type": "result_not_serializable", "message": str(unusable)}
    except Exception as exc:  # the body's error: its writes are rolled back, the error is its answer
        if is_transient(exc):
            # The store failed, not the body: nothing is written as its answer. The attempt has no
            # result (or, if a lost acknowledgement hid a commit, its result): the ledger says which.
            raise
        log.warning("run %s: transactional tool %r raised; its writes are rolled back, the error is its answer", run_id, tool.name, exc_info=True)
        error = {"type": type(exc).__name__, "message": str(exc)}
    crash_point("after_body", tool.name)
    with engine.begin() as conn:
        return cast(RecordOutcome, dict(attempt_gate.record(conn, run_id, dispatch_id, attempt, "error", None, error)))
