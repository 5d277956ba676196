"""Entries, answers and stops: the API side's transactions, each refusing bad input before it writes.

Every entry passes the run-start gate: one compare-and-set on the session's version, so of two
concurrent entries into one session exactly one wins and the other gets ``AgentAlreadyRunningError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

import sqlalchemy as sa

from ...definitions import Agent
from ...errors import (
    AgentAlreadyRunningError,
    AnswerKindError,
    CallNotFoundError,
    CallsPendingError,
    CheckpointNotFoundError,
    DuplicateAnswerError,
    NothingToResumeError,
    SessionNotFoundError,
    StaleAnswerError,
    UnknownAgentError,
    ValidationError,
)
from ...ledger import calls as call_rows
from ...ledger.calls import get_call, settle_call
from ...ledger.checkpoints import get_checkpoint, latest_checkpoint
from ...ledger.events import emit
from ...ledger.records import CallRow, CheckpointRow, RunRow, SessionRow
from ...ledger.rows import new_id
from ...ledger.runs import end_run, get_run
from ...ledger.sessions import get_session
from ...ledger.statuses import CALL_SETTLED, RUN_LIVE, EntryKind, RunStatus, awaits_answer
from ...ledger.stops import request_stop, stop_at
from ...recovery import Profile
from ..floor import commits, pairing, transcript
from ..floor.records import Answered, OpenedRun, StopRequested
from ..floor.registry import agent_named
from ..floor.runs import RunOpening, open_first_run, open_run_row
from ..process import dbos_private

#: Why a ``running`` run's workflow can no longer finish: "cancelled" (an operator's
#: ``dbos workflow cancel`` whose process never settled it), "lost" (never started, or its executor
#: is gone), or None while it lives.
#: It reads DBOS's row of the run on the entry's own connection (``conn``): a second connection per
#: entry would starve the API pool when many entries wait on one session's lock.
LivenessCheck = Callable[[RunRow, sa.Connection], str | None]


def _pending_unanswered(conn: sa.Connection, cp: CheckpointRow | None) -> list[CallRow]:
    ref = pairing.step_ref(conn, cp)
    if cp is None or cp["kind"] != "suspension" or ref is None:
        return []
    calls = pairing.calls_of_step(conn, ref["run_id"], ref["step"])
    return [c for c in calls if c["status"] == "pending" and awaits_answer(c["kind"], c["requires_approval"], c["approved"])]


def _alive(run: RunRow, conn: sa.Connection) -> str | None:
    return None


def _never_queued(agent_name: str) -> bool:
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryRequest:
    """One entry as its caller asks for it: the kind, the session (None: a start of a new one), the
    agent a start names, the message, the checkpoint a rewind starts from, and the caller's principal.

    ``owner`` stamps a new session; on an existing one it must match, or the session does not exist
    for this caller (checked under the row lock, so a race on a chosen session id cannot hand one
    principal a turn in another's session).

    ``run_id`` (and ``new_session_id``, the id of the session a start without ``session_id``
    creates; None: minted in the transaction) are minted with the request, before its first try: a
    try whose commit's acknowledgement was lost then finds its run by id (``opened_run``).
    """

    entry: EntryKind
    session_id: str | None
    agent_name: str | None = None
    message: str | None = None
    checkpoint_id: str | None = None
    owner: str | None = None
    run_id: str = field(default_factory=new_id)
    new_session_id: str | None = None


@dataclass(frozen=True, slots=True)
class Admission:
    """What the admitting process brings to every entry it admits.

    ``agents`` and ``profile``: the process's agents and recovery profile; ``executor_id``: the one
    a run started here is stamped with (None: a front end's entry, which a worker takes).

    ``is_dead``: whether a live run's workflow can no longer finish (``LivenessCheck``).

    ``queued(agent_name)``: whether a run of that agent waits on a queue for a worker (the caller
    enqueues it in the same transaction); a session whose run is ``queued`` refuses another entry
    like a running one.
    """

    agents: Mapping[str, Agent]
    profile: Profile
    executor_id: str | None
    is_dead: LivenessCheck = _alive
    queued: Callable[[str], bool] = _never_queued


def open_run(conn: sa.Connection, request: EntryRequest, admission: Admission) -> OpenedRun:
    """Validate the entry against the session's state, win the gate, and write the run's row.

    A session whose run is still live refuses the entry. A run whose workflow can no longer finish
    (never started, cancelled, or pending on an executor that is gone: ``admission.is_dead``) is
    ended ``failed``/``executor_lost`` here, without pairing its calls, so this entry recovers its
    saved step from the ledger in a new workflow.
    """
    req, agents = request, admission.agents
    session_id = req.session_id
    if session_id:
        _refuse_a_running_session_unlocked(conn, session_id, req, admission)
    session = get_session(conn, session_id, for_update=True) if session_id else None
    if session is not None and req.owner is not None and session["owner"] != req.owner:
        raise SessionNotFoundError(f"no session {session_id!r}")
    if session is None:
        if req.entry != "start":
            raise SessionNotFoundError(f"no session {session_id!r}")
        if req.agent_name is None or req.agent_name not in agents:
            raise UnknownAgentError(f"no agent named {req.agent_name!r}")
        session_id = session_id or req.new_session_id or new_id()
        waits = admission.queued(req.agent_name)
        if req.checkpoint_id is not None:  # a new session has no checkpoint (the same refusal _check_entry gives)
            raise CheckpointNotFoundError(f"no checkpoint {req.checkpoint_id!r} in session {session_id!r}")
        session = open_first_run(
            conn, session_id=session_id, agent_name=req.agent_name, owner=req.owner,
            opening=RunOpening(run_id=req.run_id, entry=req.entry, message=req.message, max_steps=agents[req.agent_name].max_steps,
                               recovery=admission.profile, executor_id=admission.executor_id, queued=waits),
        )
        if session is None:
            # Another start of this new session id created it between our read and our insert: it
            # won the session's first run, as the gate's compare-and-set decides between turns.
            raise AgentAlreadyRunningError(f"session {session_id!r} was created by a concurrent start")
        return OpenedRun(req.run_id, session_id, req.entry, req.agent_name, session["owner"], waits)
    entry = req.entry
    if entry == "start":
        if req.agent_name is not None and req.agent_name != session["agent_name"]:
            raise ValidationError(f"session {session_id!r} belongs to agent {session['agent_name']!r}, not {req.agent_name!r}")
        entry = "turn"
    if session["agent_name"] not in agents:
        raise UnknownAgentError(f"no agent named {session['agent_name']!r} is defined in this process")
    assert session_id is not None
    previous = get_run(conn, session["current_run_id"]) if session["current_run_id"] else None
    if session["status"] in RUN_LIVE:
        dead = admission.is_dead(previous, conn) if previous is not None else None
        if previous is not None and dead is None:
            raise AgentAlreadyRunningError(f"session {session_id!r} already has a running run", detail={"run_id": session["current_run_id"]})
        if previous is not None and dead == "cancelled":
            # DBOS cancelled it while no process of ours could notice: settle it as the cancel meant.
            commits.settle_cancel(conn, previous["run_id"], agents, admission.profile)
            previous = get_run(conn, previous["run_id"])
        elif previous is not None:
            end_run(conn, previous["run_id"], "failed", error_code="executor_lost", error="the run's workflow can no longer finish; a new entry took over")
            previous = get_run(conn, previous["run_id"])
        session = get_session(conn, session_id, for_update=True)
        assert session is not None
    _check_entry(conn, entry, session, _applied(conn, previous), req.message, req.checkpoint_id)

    agent_name = session["agent_name"]
    waits = admission.queued(agent_name)
    opened = open_run_row(conn, session, RunOpening(
        run_id=req.run_id, entry=entry, message=req.message, checkpoint_id=req.checkpoint_id,
        max_steps=agents[agent_name].max_steps, recovery=admission.profile, executor_id=admission.executor_id, queued=waits,
    ))
    if not opened:
        raise AgentAlreadyRunningError(f"session {session_id!r} was claimed by a concurrent entry")
    return OpenedRun(req.run_id, session_id, entry, agent_name, session["owner"], waits)


def _refuse_a_running_session_unlocked(conn: sa.Connection, session_id: str, req: EntryRequest, admission: Admission) -> None:
    """Refuse an entry into a session whose run is live and alive from a plain read, before the gate's lock.

    Why: every entry takes the session's row lock (on SQLite the file's one write lock) to decide,
    so 200 starts of one running session queued 200 write transactions behind each other, and on a
    loaded machine the last ones waited past the store's retry window (``store_unavailable``) only
    to be told ``session_running``. The refusal read here is the one the locked path would give at
    this moment (the session running, its run's workflow able to finish); anything else (no session,
    another owner, another agent, a run at rest or dead) is decided under the lock as before.
    """
    peek = get_session(conn, session_id)
    if peek is None or peek["status"] not in RUN_LIVE or not peek["current_run_id"]:
        return
    if req.owner is not None and peek["owner"] != req.owner:
        return
    if req.entry == "start" and req.agent_name is not None and req.agent_name != peek["agent_name"]:
        return
    if peek["agent_name"] not in admission.agents:
        return
    row = dbos_private.workflow_row(conn, peek["current_run_id"])
    if row is None:
        return
    status, owner = row
    # alive at a glance: queued or running here; a run another executor holds, or one whose
    # workflow ended or was cancelled, is judged under the lock (``is_dead`` probes and may write)
    if status in ("ENQUEUED", "PENDING") and (status == "ENQUEUED" or not owner or owner == admission.executor_id):
        raise AgentAlreadyRunningError(f"session {session_id!r} already has a running run", detail={"run_id": peek["current_run_id"]})


def opened_run(conn: sa.Connection, run_id: str, queued: Callable[[str], bool]) -> OpenedRun | None:
    """What ``open_run(run_id=run_id)`` answered, if a try of it committed (None: none did).

    An entry's retry after a store error asks this first: a commit whose acknowledgement was lost
    did commit, and the run's row under the id the entry minted is its whole outcome (the session
    it claimed, the deps and the queue row all committed with it). Without this the retry would open
    a second run, or meet its own run and refuse itself ``session_running``. ``queued`` is the
    process's rule (``Runtime._enqueues``), which does not change between tries.
    """
    run = get_run(conn, run_id)
    if run is None:
        return None
    session = get_session(conn, run["session_id"])
    assert session is not None  # a run's session is never deleted
    return OpenedRun(run_id, run["session_id"], run["entry"], run["agent_name"], session["owner"], queued(run["agent_name"]))


def _applied(conn: sa.Connection, run: RunRow | None) -> RunRow | None:
    """The latest run that applied its entry: a run stopped while queued (withdrawn: it never
    started) changed nothing, so ``retry`` and ``resume`` look past it to the run before."""
    while run is not None and run["started_at"] is None and run["status"] not in RUN_LIVE and run["previous_run_id"]:
        run = get_run(conn, run["previous_run_id"])
    return None if run is not None and run["started_at"] is None and run["status"] not in RUN_LIVE else run


def _check_entry(
    conn: sa.Connection,
    entry: str,
    session: SessionRow,
    previous: RunRow | None,
    message: str | None,
    checkpoint_id: str | None,
) -> None:
    sid = session["session_id"]
    if entry in ("resume_with_message", "retry_with_message", "turn", "retry_from_checkpoint") and not message:
        raise ValidationError(f"{entry} needs a message")
    if checkpoint_id is not None:
        cp = get_checkpoint(conn, checkpoint_id)
        if cp is None or cp["session_id"] != sid:
            raise CheckpointNotFoundError(f"no checkpoint {checkpoint_id!r} in session {sid!r}")
        if cp["kind"] != "append":
            raise ValidationError(f"checkpoint {checkpoint_id!r} is a {cp['kind']} checkpoint; entries take a saved append")
    if entry in ("resume_continue", "retry", "resume_from_checkpoint") and previous is None:
        raise NothingToResumeError(f"session {sid!r} has no run to resume")
    if entry == "resume_continue":
        if _pending_unanswered(conn, latest_checkpoint(conn, sid)):
            raise CallsPendingError(f"session {sid!r} is waiting for answers to its pending calls")
        if previous is not None and previous["status"] == "completed":
            raise NothingToResumeError(f"session {sid!r} completed; send a new turn instead")
    if entry == "retry" and previous is not None and previous["status"] not in ("failed", "interrupted"):
        raise NothingToResumeError(f"retry() follows a failed or interrupted run; the last run is {previous['status']}")


# --- answers -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerRequest:
    """One answer to a pending call: an approval's decision (``kind="approval"``: ``approved``,
    ``reason``, ``actor``) or a client tool's result (``kind="client"``: ``result``, or ``error``).

    ``at``: the answer's time (the call's ``answered_at``), minted with the request, before its
    first try, so a try whose commit's acknowledgement was lost is found by ``answered``."""

    session_id: str
    dispatch_id: str
    kind: Literal["approval", "client"]
    approved: bool | None = None
    reason: str | None = None
    actor: str | None = None
    result: Any = None
    error: str | None = None
    at: datetime | None = None


def answer(conn: sa.Connection, request: AnswerRequest) -> Answered:
    """Record one answer, bound to the kind of pending call and fenced on the run that suspended."""
    session_id, dispatch_id, kind, at = request.session_id, request.dispatch_id, request.kind, request.at
    approved, reason, actor, result, error = request.approved, request.reason, request.actor, request.result, request.error
    session = get_session(conn, session_id, for_update=True)
    if session is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    call = get_call(conn, dispatch_id, for_update=True)
    if call is None or call["session_id"] != session_id:
        raise CallNotFoundError(f"no call {dispatch_id!r} in session {session_id!r}")
    is_client = call["kind"] == "client"
    if kind == "approval" and not call["requires_approval"]:
        raise AnswerKindError(f"call {dispatch_id!r} does not await an approval" + (" (it is a client call: submit its result)" if is_client else ""))
    if kind == "client" and not is_client:
        raise AnswerKindError(f"call {dispatch_id!r} is not a client call" + (" (it awaits an approval)" if call["requires_approval"] else ""))
    if call["answered_at"] is not None or call["approved"] is not None:
        raise DuplicateAnswerError(f"call {dispatch_id!r} was answered already")
    latest = latest_checkpoint(conn, session_id)
    ref = pairing.step_ref(conn, latest)
    suspended_here = (
        session["status"] == "suspended_client_tool"
        and call["status"] == "pending"
        and latest is not None
        and latest["kind"] == "suspension"
        and ref is not None
        and (ref["run_id"], ref["step"]) == (call["run_id"], call["step"])
    )
    if not suspended_here:
        raise StaleAnswerError(_stale_reason(call, session))
    run_id = str(session["current_run_id"])
    if kind == "approval":
        call_rows.record_approval(conn, dispatch_id, bool(approved), reason, actor, at)
        emit(conn, session_id, run_id, "approval_decided", {"dispatch_id": dispatch_id, "approved": bool(approved), "reason": reason, "actor": actor})
        if not approved:
            fresh = get_call(conn, dispatch_id)
            assert fresh is not None
            settle_call(conn, fresh, "denied", run_id=run_id, paired_by="answer", note=reason)
    else:
        ok, value = transcript.jsonable(result)
        if not ok:
            raise ValidationError(str(value))
        call_rows.mark_answered(conn, dispatch_id, at)
        fresh = get_call(conn, dispatch_id)
        assert fresh is not None
        if error is not None:
            settle_call(conn, fresh, "error", run_id=run_id, paired_by="answer", error={"type": "client_error", "message": error})
        else:
            settle_call(conn, fresh, "ok", run_id=run_id, paired_by="answer", result=value)
    remaining = _pending_unanswered(conn, latest)
    return Answered(run_id, not remaining, [c["dispatch_id"] for c in remaining])


def answered(conn: sa.Connection, *, session_id: str, dispatch_id: str, at: datetime) -> Answered | None:
    """What ``answer(at=at)`` answered, if a try of it committed (None: none did): the call's
    answer stamped ``at`` is this entry's own. ``remaining`` is the calls of its step still
    unanswered when it committed (none answered, or answered after it), so of several answers only
    the last continues the run, as when nothing was retried."""
    if not call_rows.answered_at(conn, dispatch_id, at):
        return None
    session, call = get_session(conn, session_id), get_call(conn, dispatch_id)
    assert session is not None and call is not None
    utc = at.astimezone(UTC)

    def unanswered_then(c: CallRow) -> bool:
        when = c["answered_at"]
        later = when is not None and (when if when.tzinfo else when.replace(tzinfo=UTC)) > utc
        return c["dispatch_id"] != dispatch_id and (c["kind"] == "client" or bool(c["requires_approval"])) and (when is None or later)

    remaining = [c["dispatch_id"] for c in pairing.calls_of_step(conn, call["run_id"], call["step"]) if unanswered_then(c)]
    return Answered(str(session["current_run_id"]), not remaining, remaining)


def _stale_reason(call: CallRow, session: SessionRow) -> str:
    """Why an answer can no longer land, in words that match the call's row."""
    dispatch_id, status = call["dispatch_id"], call["status"]
    if call["paired_by"] == "rewind":
        return (f"call {dispatch_id!r} can no longer be answered: run {call['settled_run_id']!r} rewound the session "
                f"past it and answered it {status}")
    if status in CALL_SETTLED:
        return f"call {dispatch_id!r} can no longer be answered: it was answered {status} (by {call['paired_by']})"
    return f"call {dispatch_id!r} is not on the step the session waits at (call {status}, session {session['status']})"


# --- stop ----------------------------------------------------------------------------------------


def stop(
    conn: sa.Connection, *, session_id: str, kind: str, requested_by: str | None, agents: Mapping[str, Agent], profile: Profile, at: datetime | None = None,
) -> StopRequested:
    """Write one durable stop record for the current run and return; a suspended run stops here and
    now, and so does a queued one no worker has taken yet (withdrawn from its queue).

    ``at``: the record's time, minted by the caller before its first try (found by ``stopped``)."""
    if kind not in ("interrupt", "abort"):
        raise ValidationError(f"stop kind must be 'interrupt' or 'abort', not {kind!r}")
    session = get_session(conn, session_id, for_update=True)
    if session is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    run_id = session["current_run_id"]
    if session["status"] not in ("queued", "running", "suspended_client_tool") or run_id is None:
        raise NothingToResumeError(f"session {session_id!r} has no live run to stop (status {session['status']})")
    first = request_stop(conn, session_id, run_id, kind, requested_by, at)
    if session["status"] == "queued" and dbos_private.withdraw_enqueued(conn, run_id):
        # No worker took it yet, and now none will (off its queue in this transaction): it ends here
        # without having applied its entry, so the session stands as before it, and the next entry
        # (a turn, resume or retry) starts from there. A worker that dequeued it first makes the
        # withdrawal a no-op, and the run stops at its first boundary as a running one does.
        status: RunStatus = "interrupted" if kind == "interrupt" else "failed"
        emit(conn, session_id, run_id, "run_withdrawn", {"kind": kind, "requested_by": requested_by})
        end_run(conn, run_id, status, error_code="run_stopped" if kind == "abort" else None,
                      error="stopped while queued: no worker ran it" if kind == "abort" else None)
        return StopRequested(run_id, True, status)
    if session["status"] == "suspended_client_tool":
        # No workflow is live to notice the record: the stop completes in this transaction.
        run = get_run(conn, run_id)
        assert run is not None
        # the caller's agents and profile: a front end has no launched runtime to read them from
        out = commits.settle_stop(conn, run, kind, agent_named(agents, run["agent_name"]), profile)
        return StopRequested(run_id, True, cast(RunStatus, out.status))  # a stop ends the run: never "committed"
    return StopRequested(run_id, False, "stop_requested" if first else "stop_already_requested")


def stopped(conn: sa.Connection, *, session_id: str, at: datetime) -> StopRequested | None:
    """What ``stop(at=at)`` answered, if a try of it committed (None: none did): the session's stop
    record stamped ``at`` is this entry's own. A run it ended in that transaction (suspended or
    queued) is at rest ``interrupted`` or ``failed``; otherwise the stop waits for the run's next
    boundary (``stop_requested``). A running run that has since stopped at that boundary reads as
    stopped: the receipt tells where the stop stands when it is answered."""
    run_id = stop_at(conn, session_id, at)
    if run_id is None:
        return None
    run = get_run(conn, run_id)
    assert run is not None
    if run["status"] in ("interrupted", "failed"):
        return StopRequested(run_id, True, cast(RunStatus, run["status"]))
    return StopRequested(run_id, False, "stop_requested")
