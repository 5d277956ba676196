"""One run = one DBOS workflow (workflow id = run id), whose only input is the run id.

Per step: the model request (not a DBOS step: its reply is recorded by one ledger transaction) ->
the append checkpoint (one exactly-once ledger transaction: the reply, every call, a fresh
dispatch id each) -> the bodies (not DBOS steps: each opens with a committed attempt and ends with
its result write) -> the step commit (one exactly-once ledger transaction). A step whose reply
starts no body makes no append: its reply, calls and answers (or its suspension) go in one commit.

Determinism under DBOS replay: the workflow's ledger transactions record their own outputs
(``durable.tx``, keyed by their order), bodies make no DBOS operations (a replay re-enters their
gates, which answer from the ledger), and remote children are dispatched and awaited in reply order
around the lanes, so parallel lanes finishing in any order replay the same DBOS operations.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import traceback
from collections.abc import Callable, Mapping
from typing import Final, TypeVarTuple, cast

import sqlalchemy as sa
from dbos import DBOS, StepOptions

from ...errors import (
    HelixError,
    OutputRetriesExceededError,
    RunFencedError,
    StoreStatementError,
    StoreUnavailableError,
    helix_code,
)
from ...ledger.engine import without_sql
from ...ledger.names import (
    APPEND_TX,
    COMMIT_TX,
    FAIL_TX,
    MODEL_STEP,
    PREPARE_TX,
    RUN_WORKFLOW,
    SAVED_CALLS_TX,
    STOP_TX,
)
from ...ledger.records import FenceRow, RunRow
from ...ledger.runs import get_run
from ...ledger.statuses import BODY_KINDS
from ...ledger.user_json import JsonObject
from ...recovery import lanes
from ...views import RunResult
from ..floor import codec, commits, durable, fence, reads
from ..floor.durable import plain_tx, recorded, step, tx, tx_and_read, workflow_function
from ..floor.records import (
    CallBrief,
    ChildGate,
    EntryPlan,
    LaneCall,
    ModelReply,
    Preread,
    RaisedReply,
    Reply,
    ReplyRecord,
    StepOutcome,
    StepRef,
    StoppedReply,
)
from ..floor.registry import Env, Registry
from ..process import trace_export, tracing
from ..process.dbos_private import DBOSWorkflowCancelledError, DBOSWorkflowConflictIDError
from ..process.faults import crash_point, fail_point
from . import children, companions, reconcile, scopes
from .bodies import run_body
from .model_request import (
    ModelRequestFailed,
    RecordedFailure,
    ask,
    live_model_request_step,
    preread,
)
from .planning import gives_no_output, starts_a_body

#: Call kinds answered by a child workflow rather than a body of the parent.
CHILD_KINDS: Final = frozenset({"remote", "companion"})
log = logging.getLogger("helix_dbos")
Ts = TypeVarTuple("Ts")


class MaxStepsReached(Exception):
    """The run used its ``max_steps`` model requests; it fails typed and ``retry()`` gets a fresh budget."""


def register(registry: Registry) -> None:
    """Register the run workflow, bound to ``registry``, with the DBOS instance about to launch.

    DBOS resolves it by name (``helix.run``) on recovery, so the function under that name is this
    launch's closure; children and companions start it from the registry, never from a module.
    """

    async def run(run_id: str) -> JsonObject:
        # DBOS gives a workflow its input only: the registry comes from this closure, and is handed down
        return await _run(registry, run_id)

    # binds it on the registry for entries, children and companions, and registers the companion workflow
    registry.bind_run_workflow(DBOS.workflow(name=RUN_WORKFLOW)(workflow_function(run, registry)))
    companions.register(registry)


async def _run(registry: Registry, run_id: str) -> JsonObject:
    """The workflow's output is recorded by DBOS (``_output``: the outcome's JSON, escaped as step
    outputs are); nothing reads it back.

    The run's root span is emitted when this execution ends, whichever way (``_root_span``)."""
    with tracing.in_run(run_id):
        try:
            return await _run_once(registry, run_id)
        finally:
            if DBOS.workflow_id == run_id:  # a refused fork is not the run: the run's own execution emits its root
                await _root_span(registry.env.engine, run_id)


async def _root_span(engine: sa.Engine, run_id: str) -> None:
    """Emit the trace's ``helix.run`` span from the run's row, as it stands once this execution ends.

    Best-effort like every span: a read that fails leaves the trace without its root, never the run
    without its outcome. A process killed before this point emits nothing; the one that relaunches
    the workflow (and ends the run) does."""
    if not tracing.enabled():
        return
    try:
        run = await asyncio.to_thread(_read_run, engine, run_id)
        if run is not None:
            tracing.emit_run_span(run)
            await trace_export.flushed()
    except Exception:
        log.debug("could not emit the run's root span", exc_info=True)


def _read_run(engine: sa.Engine, run_id: str) -> RunRow | None:
    """The run's row once it has ended; None while it is still running (an execution cut short by a
    shutdown: the execution that recovers the workflow emits the root instead)."""
    with engine.connect() as conn:
        run = get_run(conn, run_id)
    return run if run is not None and run["status"] != "running" else None


async def _run_once(registry: Registry, run_id: str) -> JsonObject:
    e = registry.env
    workflow_id = DBOS.workflow_id
    if workflow_id != run_id:  # a DBOS fork: a new workflow over the run's input is never the run
        raise await _refused(e, run_id, workflow_id, fence.fork_refusal(run_id, workflow_id))
    try:
        return _output(await _drive(registry, run_id))
    except (DBOSWorkflowCancelledError, DBOSWorkflowConflictIDError):
        # DBOS's cancel clears the workflow's owner, so the run meets either error at its next step.
        await _settle_cancel(e, run_id)
        raise
    except Exception as exc:
        if fence.is_fenced(exc):
            raise await _refused(e, run_id, workflow_id, exc) from None
        code, error = failure(exc)
        log.warning("run %s fails (%s): %s", run_id, code, error, exc_info=exc)  # the ledger keeps the words, the log the traceback
        await _ask_before_failing(registry, run_id, code)
        # DBOS retries this transaction until the store answers: after an outage past the window the
        # failure is written once the database is back, pairing every call the run left unanswered.
        try:
            return _output(await _ending(e, FAIL_TX, commits.fail_run, run_id, code, error))
        except Exception as again:
            if fence.is_fenced(again):
                raise await _refused(e, run_id, workflow_id, again) from None
            raise


async def _ask_before_failing(registry: Registry, run_id: str, code: str) -> None:
    """Before a failure pairs the run's started calls, ask their reconcile checks and record the
    verdicts, as a recovery would: ``Applied`` answers a call ``ok`` (and ``retry()`` keeps it),
    ``NotApplied`` pairs it ``not_started`` (and ``retry()`` runs it again).

    Bounded by each check's ``reconcile_timeout`` (they are asked side by side), and never in the way
    of the failure: when the store is what failed it asks nothing (its reads would wait out another
    window), and any error here only means the calls are paired ``outcome_unknown``, as without a
    check, for ``retry()`` to ask again.
    """
    if code == StoreUnavailableError.code:
        return
    try:
        await reconcile.ask_before(registry, run_id, commits.failure_checks)
    except Exception as exc:  # the failure is written whatever happened here
        if not fence.is_fenced(exc):  # fenced: the failure transaction is refused too, and says so
            log.warning("run %s: reconcile checks before the failure were not asked: %s", run_id, exc, exc_info=exc)


def failure(exc: BaseException) -> tuple[str, str]:
    """The run's ``error_code`` and ``error`` for an exception that ended it.

    Only helix_dbos's own codes are codes (also a HelixError DBOS replayed from a recorded step
    error); anything else is ``run_error`` with the exception's text. A driver's ``code`` attribute
    (SQLAlchemy's ``e3q8``) is a documentation key, not an answer.
    """
    if isinstance(exc, MaxStepsReached):
        return "max_steps", str(exc)
    if isinstance(exc, RecordedFailure):
        return exc.code, exc.error
    code = helix_code(exc)
    if code is not None:
        detail = exc.detail if isinstance(exc, HelixError) else None
        return code, str(exc) + (f" (last error: {detail})" if isinstance(detail, str) and detail else "")
    driver = without_sql(exc)
    if driver is not None:  # a statement of the runtime's own: what the driver said, never the SQL text
        return StoreStatementError.code, f"a statement of the runtime failed at the database: {driver}"
    return "run_error", "".join(traceback.format_exception_only(type(exc), exc)).strip() or type(exc).__name__


async def _refused(e: Env, run_id: str, workflow_id: str | None, exc: BaseException) -> RunFencedError:
    """Record the refusal (one event, no other write) and give the typed error DBOS will record (``fence.refuse``)."""
    return await durable.off_loop(fence.refuse, e.engine, run_id, workflow_id, exc)


async def _settle_cancel(e: Env, run_id: str) -> None:
    """``dbos workflow cancel`` of a live run: settle it like ``stop(kind="abort")``, outside DBOS's
    bookkeeping (a cancelled workflow may not start steps), fenced like any transaction of the run."""

    def settle() -> None:
        with e.engine.begin() as conn:
            if durable.dbos_status(conn, run_id) == "CANCELLED":  # not another execution taking over
                commits.settle_cancel(conn, run_id, e.agents, e.profile)

    await durable.off_loop(settle)  # a stopping process leaves it to the next launch's wake


async def _drive(registry: Registry, run_id: str) -> StepOutcome:
    e = registry.env
    await _refresh(e, run_id)
    # A redirect pairs the saved step's started calls: first ask their reconcile checks (recorded).
    # With no reconciled tool defined here there is nothing to ask (recovery judges a saved call by
    # the tool as it is now), and the read is skipped: one transaction fewer per run.
    if _defines_checks(e):
        await reconcile.ask_before(registry, run_id, commits.redirect_checks)
    prepare_entry = tracing.traced(tracing.PREPARE_SPAN, commits.prepare_entry, run_id, lambda p: {"mode": p.mode, "step": p.step})
    plan, first_read = await tx_and_read(
        PREPARE_TX, prepare_entry, lambda conn, plan: _first_read(conn, e, run_id, plan), e, run_id, read_as=EntryPlan
    )
    if first_read is not None:
        e.prereads.put(run_id, first_read)
    sid = plan.session_id
    agent = e.agent(plan.agent_name)
    budget = plan.max_steps
    used = 0
    output_failures = 0  # replies with no valid output in this run: pydantic-ai's output_retries_used
    step_no = plan.step
    if plan.recover is not None:  # "recover" mode
        outcome = await _answer_saved_calls(registry, run_id, sid, plan.recover, None)
        if not outcome.goes_on:
            return outcome
    while True:
        if used >= budget:
            raise MaxStepsReached(f"the run used its {budget} model requests (max_steps) without finishing")
        reply, recorded_already = await _model_reply(e, run_id, sid, agent.name, step_no)
        used += 1
        if isinstance(reply, StoppedReply):
            return await _ending(e, STOP_TX, commits.stop_run, run_id, reply.stopped)
        if recorded_already:
            crash_point("after_model")
        planned = reply.planned
        if starts_a_body(planned):
            append = tracing.traced(tracing.APPEND_SPAN, commits.append_checkpoint, run_id, session_id=sid, step=step_no, calls=len(planned))
            if recorded_already:
                saved = await tx(APPEND_TX, append, run_id, sid, step_no, reply, planned, recorded_as=commits.appended_record)
            else:  # the reply's record and the append commit together (``durable.tx_with_reply``)
                saved = await durable.tx_with_reply(reply, APPEND_TX, append, run_id, sid, step_no, reply, planned, recorded_as=commits.appended_record)
                crash_point("after_model")
            crash_point("after_append")
            # a replayed append's record holds no calls (``commits.appended_record``): read from the ledger
            calls = saved["calls"] if "calls" in saved else await plain_tx(commits.saved_calls, saved)
            outcome = await _answer_saved_calls(registry, run_id, sid, saved, calls)
        else:
            crash_point("before_step_commit")
            fail_point("step_commit")
            commit = tracing.traced(tracing.STEP_COMMIT_SPAN, commits.commit_without_bodies, run_id, _commit_outcome, session_id=sid, step=step_no, saved=False)
            outcome = await _ending(e, COMMIT_TX, commit, run_id, sid, step_no, reply, planned, agent.output_type is not None, then=(sid, step_no + 1))
            crash_point("after_step_commit")
        if not outcome.goes_on:
            return outcome
        if agent.output_type is not None and gives_no_output(planned):
            # answered with its retry prompt (committed, so retry() asks the model with it again);
            # the agent's output_retries, not max_steps, bound how often
            output_failures += 1
            if output_failures > agent.output_retries:
                raise OutputRetriesExceededError(
                    f"Exceeded maximum output retries ({agent.output_retries}): the model gave no valid output "
                    f"{output_failures} times in this run", detail={"output_retries": agent.output_retries},
                )
        step_no += 1


async def _model_reply(e: Env, run_id: str, sid: str, agent_name: str, step_no: int) -> tuple[Reply, bool]:
    """The step's reply (or the stop the request read instead), and whether it is recorded yet.

    A replay takes the reply recorded before (a recorded failure raises again); otherwise the model
    is asked and its outcome recorded in one ledger transaction (``durable.record_reply``) before
    anything acts on it, except a reply that starts a body: the append checkpoint is the first
    thing that acts on it, and records it in its own transaction (``durable.tx_with_reply``; False
    here). With live output the request is a DBOS step (its deltas are DBOS stream writes, which
    need a step's context) and DBOS records the reply instead.
    """
    if e.live_output:
        # the retry budget is the step's own (``model_request.ask``, inside it): DBOS retries nothing
        options: StepOptions = {"name": MODEL_STEP, "retries_allowed": False}
        reply = await step(options, functools.partial(live_model_request_step, e), run_id, sid, agent_name, step_no, read_as=ReplyRecord)
        return reply, True  # recorded by DBOS as the reply's JSON (``codec``), read back as the reply
    replayed = await durable.replayed_reply()
    if replayed is not None:
        if isinstance(replayed, RaisedReply):
            raise RecordedFailure(replayed.error_code, replayed.error)
        return replayed, True
    try:
        reply = await ask(e, run_id, sid, agent_name, step_no)
    except ModelRequestFailed as failed:  # the request's outcome, recorded as a reply is: never asked again
        await durable.record_reply(RaisedReply(*failure(failed.cause)))
        crash_point("after_model")
        failed.reraise()
    if isinstance(reply, ModelReply) and starts_a_body(reply.planned):
        return reply, False
    return await durable.record_reply(reply), True


async def _ending(
    e: Env, name: str, fn: Callable[[sa.Connection, Env, str, *Ts], StepOutcome], run_id: str, *args: *Ts, then: tuple[str, int] | None = None
) -> StepOutcome:
    """A transaction that may bring the run to rest (a step commit, the stop, the failure): when it
    does, it also reads the run's result, handed to a caller waiting in this process
    (``RunHandle.result``) so the wait pays no read of its own (``handoff.py``). A step commit after
    which the run goes on to the model request of ``then`` (session, step) reads what that request
    reads first, in the same transaction (``model_request.preread``, as the prepare does): the
    request pays no transaction of its own for it."""
    outcome, read = await tx_and_read(name, fn, _after_read(e, run_id, then), e, run_id, *args, read_as=StepOutcome)
    if isinstance(read, Preread):
        e.prereads.put(run_id, read)
    elif read is not None:
        e.settled.put(run_id, read)
    return outcome


def _after_read(e: Env, run_id: str, then: tuple[str, int] | None) -> Callable[[sa.Connection, StepOutcome], RunResult | Preread | None]:
    def read(conn: sa.Connection, outcome: StepOutcome) -> RunResult | Preread | None:
        if not outcome.goes_on:
            return reads.at_rest(conn, run_id)
        return preread(conn, e, run_id, *then) if then is not None else None

    return read


def _first_read(conn: sa.Connection, e: Env, run_id: str, plan: EntryPlan) -> Preread | None:
    """The prepare's plan starts at the model: read what its first request reads, in the same
    transaction (``model_request.preread``)."""
    if plan.mode != "model":
        return None
    return preread(conn, e, run_id, plan.session_id, plan.step)


def _commit_outcome(out: StepOutcome) -> Mapping[str, object]:
    """The step commit's span attribute: the run's status after it (``committed``: it goes on)."""
    return {"status": out.status}


def _output(outcome: StepOutcome) -> JsonObject:
    """The workflow's output as DBOS records it: the outcome's JSON (``codec``), escaped as step outputs are."""
    return cast(JsonObject, recorded(codec.encode(outcome)))


def _defines_checks(e: Env) -> bool:
    return any(t.reconcile is not None for a in e.agents.values() for t in a.tools)


async def _refresh(e: Env, run_id: str) -> None:
    """A pydantic-ai agent's tools are listed before the entry's recovery judges saved calls by them.

    Not a step: the listing decides nothing by itself; the recorded transactions that read it do."""
    if not any(a.uses_scope() for a in e.agents.values()):
        return
    run = await plain_tx(_run_row, run_id)
    agent = e.agent(run["agent_name"])
    if agent.uses_scope():
        await agent.refresh(await scopes.scope_of(agent, run_id, run["session_id"]))


def _run_row(conn: sa.Connection, run_id: str) -> FenceRow:
    """The run's row, read under the run fence like every ledger transaction of a run."""
    return fence.check(conn, run_id, "tool listing", admit_queued=True)


async def _answer_saved_calls(registry: Registry, run_id: str, sid: str, ref: StepRef, calls: list[CallBrief] | None) -> StepOutcome:
    """Bodies for every unanswered call of a saved step (one the ledger holds: the append checkpoint
    just saved it, or a recovered run's), then its step commit."""
    if calls is None:
        calls = await tx(SAVED_CALLS_TX, commits.calls_to_gate, run_id, ref)
    calls = [c for c in calls if c["kind"] in BODY_KINDS]
    local = [c for c in calls if c["kind"] not in CHILD_KINDS]
    # Remote children and companion turns: gated, started or sent in reply order (workflow code).
    dispatched = await _dispatch_children(registry, run_id, [c for c in calls if c["kind"] in CHILD_KINDS])

    # A body is not a DBOS step: its attempt gate and its result write are the ledger's two facts
    # about it, and a replay re-enters the gate, which answers from the ledger what happened.
    async def lane(members: list[LaneCall]) -> None:
        for m in members:
            await run_body(registry, run_id, m.dispatch_id, (m.run_id, m.step))

    # Every lane runs to its end before a failure or a cancellation propagates: a body in flight
    # finishes and records its result, so a cancel settles it as finished, not as stopped.
    outcomes = await asyncio.gather(*(lane(ln) for ln in lanes([LaneCall.of(c) for c in local])), return_exceptions=True)
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    if failures:
        raise next((f for f in failures if isinstance(f, (DBOSWorkflowCancelledError, DBOSWorkflowConflictIDError))), failures[0])

    await _settle_children(registry, run_id, dispatched)

    crash_point("before_step_commit")
    fail_point("step_commit")
    commit = tracing.traced(tracing.STEP_COMMIT_SPAN, commits.commit_after_bodies, run_id, _commit_outcome, session_id=sid, step=ref.get("step"), saved=True)
    outcome = await _ending(registry.env, COMMIT_TX, commit, run_id, sid, ref, then=(sid, ref["step"] + 1))
    crash_point("after_step_commit")
    return outcome


async def _dispatch_children(registry: Registry, run_id: str, calls: list[CallBrief]) -> list[ChildGate]:
    """Gate and start (or re-attach, or re-send to) every delegating call, in reply order: DBOS
    operations in workflow code, so their order must not depend on which lane finishes first."""
    gates = []
    for call in sorted(calls, key=lambda c: c["position"]):
        kind = children if call["kind"] == "remote" else companions
        gates.append(await kind.dispatch(registry, run_id, call["dispatch_id"], call["tool_name"]))
        crash_point("child_dispatched", call["tool_name"])
    return gates


async def _settle_children(registry: Registry, run_id: str, gates: list[ChildGate]) -> None:
    """Wait for each dispatched child in reply order and answer its call."""
    for gate in gates:
        if gate.action != "done":
            await (children if gate.kind == "remote" else companions).settle(registry, run_id, gate)
