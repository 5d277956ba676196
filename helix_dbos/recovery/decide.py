"""The recovery contract as one pure function.

``decide`` takes what the ledger saved about one step (its calls, each with the policy its tool had
when the model asked for it, the number of bodies started and the answer if any), the tools as they
are *now*, and the kind of entry; it returns one decision per call. No I/O: the runtime reads the
ledger, calls this, and writes what it says, so every rule of the seed's tables is a unit test here.

The rules, in the order they apply to a call:

1. A settled call keeps its answer (a body that returned and was recorded is never doubted).
2. A pending client or approval call waits for its answer; an answered approval runs its first body.
   A call ordered after a waiting call (same lane, see 5) waits with it.
3. A stop pairs every unsettled call whose body never started (or that awaits an answer)
   ``run_stopped``; one whose body started and left no result is answered as a redirect answers
   it (4), without asking a check: ``outcome_unknown`` unless the database or a recorded verdict
   proves it had no effect. "Stopped" would tell the model it was not completed, which nobody knows.
4. A redirecting entry (a new message) pairs every unsettled call before the message:
   ``not_started`` when no body ever started, else ``outcome_unknown`` (unless the database or a
   check proves the outcome, see below); nothing runs again.
5. A call ordered after an in-doubt call (its ``concurrency_group``, or the sequential chain) is
   ``outcome_unknown`` too: it was written to run after that call's effect.
6. A call whose body provably never started runs as its first attempt.
7. Remote children are re-attached by dispatch id (or started once under it); companions re-enter
   the child phase; a local child died with its parent, so it is ``outcome_unknown``.
8. A tool body that started but left no recorded result runs again only when the saved policy and
   the tool as it is now both say ``safe``, the saved arguments still pass the tool's schema, and
   fewer than 3 bodies have started; otherwise ``replay_limit_reached`` (3 bodies) or
   ``outcome_unknown``.

A transactional call whose body committed its transaction itself (its in-transaction marker is
committed without a result: ``escaped``) is ``outcome_unknown`` under every entry, and never runs again.

Two kinds of call are never left in doubt, because something other than the body can prove what
happened (``decided_by`` on the decision says what):

- **Transactional** (``database``): every body so far wrote only inside the transaction that also
  records its result, so an attempt without a recorded result provably had no effect. It runs again
  whatever its ``replay`` (its attempt rows are committed apart, before the body, as markers that
  carry no effect, so the 3-body limit still counts), ``replay_limit_reached`` after 3 with a note
  saying nothing took effect; under a redirect, behind a call in doubt, or when it can no longer
  run (removed, schema changed) it is ``not_started`` with a note saying it did not take effect.
- **Reconciled** (``check``): where rule 4, 5 or 8 would answer a started call ``outcome_unknown``
  and the tool now has a ``reconcile`` check that has not answered for its latest attempt, the action
  is ``reconcile``: the runtime asks the check, records its verdict on the call, and decides again.
  ``applied`` settles the call ``ok`` (the runtime does it); ``not_applied`` runs it again within the
  3-body limit even if unsafe (``not_started`` when the order rule, the schema or a redirect forbids
  a run); ``unknown`` (``None``, raised, timed out) leaves ``outcome_unknown``. With
  ``ask_checks=False`` (the entry asked already, or cannot ask) a call without a verdict is decided
  as if its check could not tell: the decisions are final, never ``reconcile``.

Under ``profile="dbos_compat"`` (the seed's DBOS row) only remote children recover; every other
interrupted call is ``outcome_unknown``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..ledger.statuses import (
    CALL_IN_DOUBT,
    CALL_SETTLED,
    CallKind,
    CallStatus,
    DecidedBy,
    PairedBy,
    Verdict,
    awaits_answer,
)
from .lanes import lane_keys
from .texts import (
    CHECKED_NOT_APPLIED,
    NOT_COMMITTED,
    NOT_RUN_AGAIN_ORDERED,
    NOT_RUN_AGAIN_REMOVED,
    NOT_RUN_AGAIN_SCHEMA,
    NOT_STARTED,
    ORDERED_AFTER_DOUBT,
    OUTCOME_UNKNOWN,
    REPLAY_LIMIT_NOT_APPLIED,
    REPLAY_LIMIT_NOTHING_COMMITTED,
    REPLAY_LIMIT_REACHED,
    RUN_STOPPED,
    TRANSACTION_ESCAPED,
)

MAX_BODIES: Final = 3

Entry = Literal["recover", "redirect", "stop", "retry"]
"""How the caller arrived at the saved step.

``recover``: a wake, ``resume(mode="continue")`` or ``resume(mode="from_checkpoint")``.
``retry``: ``retry()`` without a message, which first undoes the failed run's own pairings.
``redirect``: any entry that carries a new message. ``stop``: an interrupt or abort.
"""

Profile = Literal["full", "dbos_compat"]

#: The actions under which a call's body (or its child) goes ahead: the attempt gate commits an attempt.
BodyAction = Literal["run", "run_again", "reattach", "reenter"]
Action = Literal["keep", BodyAction, "wait", "pair", "reconcile"]


@dataclass(frozen=True, slots=True)
class SavedCall:
    """One call of a saved step, as the ledger holds it."""

    dispatch_id: str
    position: int
    tool_name: str
    kind: CallKind
    replay: str  # the policy saved on the call's row
    status: CallStatus
    attempts: int = 0
    args: Any = None
    concurrency_group: str | None = None
    sequential: bool = False
    requires_approval: bool = False
    approved: bool | None = None
    paired_by: PairedBy | None = None
    #: Every body started so far ran inside the transaction that records its result.
    transactional: bool = False
    #: What the tool's reconcile check said about the latest attempt (None: not asked since it began).
    check: Verdict | None = None
    #: A transactional body of the call committed its transaction itself: its marker is committed
    #: without a result, so its effect may exist and nothing proves otherwise.
    escaped: bool = False


@dataclass(frozen=True, slots=True)
class ToolNow:
    """A tool as the running code defines it, at recovery time (possibly after a deploy)."""

    name: str
    replay: str
    accepts: Callable[[Any], bool]
    reconcile: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    dispatch_id: str
    action: Action
    status: CallStatus | None = None  # the status to pair with, when action == "pair"
    note: str | None = None  # what the model is told, when paired
    reason: str = ""  # why, for the audit trail and the event stream
    decided_by: DecidedBy | None = None  # what proved the outcome, when not the body's own result


def _pair(call: SavedCall, status: CallStatus, note: str, reason: str, by: DecidedBy | None = None) -> Decision:
    return Decision(call.dispatch_id, "pair", status, note, reason, by)


def _certain(call: SavedCall, status: CallStatus | None) -> bool:
    """A ``replay_limit_reached`` whose attempts provably had no effect puts nothing in doubt."""
    return status == "replay_limit_reached" and (call.transactional or call.check == "not_applied")


def _lanes_of(call: SavedCall) -> tuple[str, ...]:
    return lane_keys(call.concurrency_group, call.sequential)


def _awaits_answer(call: SavedCall) -> bool:
    return awaits_answer(call.kind, call.requires_approval, call.approved)


def _unsettled(call: SavedCall, entry: Entry) -> bool:
    if call.status in CALL_SETTLED:
        # retry() rewinds past the failed run's own pairings: those calls are open again. A failed
        # run's unanswered client and approval calls stay dropped: no answer can reach them now.
        return entry == "retry" and call.paired_by == "run_failed" and not _awaits_answer(call)
    return True


def decide(
    calls: Sequence[SavedCall],
    tools_now: Mapping[str, ToolNow],
    entry: Entry = "recover",
    profile: Profile = "full",
    ask_checks: bool = True,
) -> list[Decision]:
    """One decision per call, in position order. See the module docstring for the rules.

    ``ask_checks=False``: the verdicts on the calls are all there will be (the runtime asked every
    check it could before this decision, or this entry asks none), so no decision is ``reconcile``.
    """
    decisions: list[Decision] = []
    doubted_lanes: set[str] = set()
    waiting_lanes: set[str] = set()
    for call in sorted(calls, key=lambda c: c.position):
        decision = _decide_one(call, tools_now, entry, profile, doubted_lanes, waiting_lanes, ask_checks)
        if decision.action == "wait":
            waiting_lanes.update(_lanes_of(call))
        in_doubt = (
            (decision.action == "pair" and decision.status in CALL_IN_DOUBT and not _certain(call, decision.status))
            or (decision.action == "keep" and call.status in CALL_IN_DOUBT and not _certain(call, call.status))
            or decision.action == "reconcile"  # not known yet: what follows it must not overtake it
        )
        if in_doubt:
            doubted_lanes.update(_lanes_of(call))
        decisions.append(decision)
    return decisions


def _decide_one(
    call: SavedCall,
    tools_now: Mapping[str, ToolNow],
    entry: Entry,
    profile: Profile,
    doubted_lanes: set[str],
    waiting_lanes: set[str],
    ask_checks: bool,
) -> Decision:
    if not _unsettled(call, entry):
        return Decision(call.dispatch_id, "keep", reason="settled")

    if call.escaped:  # whatever the entry: its effect may have committed, and it never runs again
        return _pair(call, "outcome_unknown", TRANSACTION_ESCAPED, "transactional body committed its own transaction: its effect may exist")

    never_started = call.attempts == 0
    waiting_answer = call.status == "pending"

    if entry == "stop":
        if never_started or waiting_answer:
            return _pair(call, "run_stopped", RUN_STOPPED, "stopped")
        # Its body started and left no result (its process died mid-body): it may have taken effect.
        # A stop asks no check; a verdict already recorded (or the database) still proves it.
        return _started_no_result(call, tools_now, profile, "stopped", ask_checks=False)

    if entry == "redirect":
        if waiting_answer and call.kind == "client":
            # The client may have acted on it already; only the client knows.
            return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "redirected while awaiting the client")
        if never_started:
            return _pair(call, "not_started", NOT_STARTED, "redirected before its body started")
        return _started_no_result(call, tools_now, profile, "redirected", ask_checks)

    if waiting_answer and _awaits_answer(call):
        return Decision(call.dispatch_id, "wait", reason="awaiting an answer")

    if any(lane in waiting_lanes for lane in _lanes_of(call)):
        return Decision(call.dispatch_id, "wait", reason="ordered after a call awaiting an answer")

    if any(lane in doubted_lanes for lane in _lanes_of(call)):
        if not never_started and call.transactional:
            return _pair(call, "not_started", NOT_COMMITTED + NOT_RUN_AGAIN_ORDERED, "ordered after a call in doubt; transactional: no effect", "database")
        if not never_started and call.kind == "tool":
            checked = _by_check(call, tools_now.get(call.tool_name), "ordered after a call in doubt", ask_checks)
            if checked is not None:
                return checked
        note = OUTCOME_UNKNOWN + (ORDERED_AFTER_DOUBT if never_started else "")
        return _pair(call, "outcome_unknown", note, _unknown_why(call, "ordered after a call in doubt"))

    if call.kind == "remote":
        return Decision(call.dispatch_id, "reattach", reason="remote child: re-attach by dispatch id")

    if never_started:
        return Decision(call.dispatch_id, "run", reason="no body ever started")

    if call.kind == "tool" and call.transactional:
        return _transactional(call, tools_now.get(call.tool_name))

    if profile == "dbos_compat":
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "dbos_compat recovers remote children only")

    if call.kind == "companion":
        return Decision(call.dispatch_id, "reenter", reason="companion: re-enter the child phase")

    if call.kind == "local":
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "local child died with its parent")

    tool = tools_now.get(call.tool_name)
    if tool is None:
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "tool no longer defined")
    doubt = None
    if call.replay != "safe":
        doubt = "saved policy is unsafe"
    elif tool.replay != "safe":
        doubt = "tool is unsafe now"
    elif not tool.accepts(call.args):
        doubt = "saved arguments fail the current schema"
    if doubt is not None:
        return _by_check(call, tool, doubt, ask_checks) or _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, _unknown_why(call, doubt))
    if call.attempts >= MAX_BODIES:
        return _pair(call, "replay_limit_reached", REPLAY_LIMIT_REACHED, f"{call.attempts} bodies already started")
    return Decision(call.dispatch_id, "run_again", reason=f"safe: attempt {call.attempts + 1} of {MAX_BODIES}")


def _started_no_result(call: SavedCall, tools_now: Mapping[str, ToolNow], profile: Profile, how: str, ask_checks: bool) -> Decision:
    """A call whose body started and left no result, answered by an entry that runs no body (a
    redirect, a stop): ``outcome_unknown``, unless the database or a check proves it had no effect."""
    if call.transactional:
        return _pair(call, "not_started", NOT_COMMITTED, f"{how}; transactional: no result committed, so no effect", "database")
    if call.kind == "tool" and profile != "dbos_compat":
        checked = _redirected_check(call, tools_now.get(call.tool_name), ask_checks, how)
        if checked is not None:
            return checked
    return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, _unknown_why(call, f"{how} after its body started"))


def _transactional(call: SavedCall, tool: ToolNow | None) -> Decision:
    """A started transactional call without a result: its bodies provably had no effect."""
    why = "transactional: no result committed, so no effect"
    if tool is None:
        return _pair(call, "not_started", NOT_COMMITTED + NOT_RUN_AGAIN_REMOVED, f"{why}; tool no longer defined", "database")
    if not tool.accepts(call.args):
        return _pair(call, "not_started", NOT_COMMITTED + NOT_RUN_AGAIN_SCHEMA, f"{why}; saved arguments fail the current schema", "database")
    if call.attempts >= MAX_BODIES:
        return _pair(call, "replay_limit_reached", REPLAY_LIMIT_NOTHING_COMMITTED, f"{why}; {call.attempts} bodies already started", "database")
    return Decision(call.dispatch_id, "run_again", reason=f"{why}: attempt {call.attempts + 1} of {MAX_BODIES}", decided_by="database")


def _unknown_why(call: SavedCall, doubt: str) -> str:
    return f"{doubt}; its reconcile check could not tell" if call.check == "unknown" else doubt


def _redirected_check(call: SavedCall, tool: ToolNow | None, ask_checks: bool, how: str = "redirected") -> Decision | None:
    """A redirect (or a stop) runs no body, so a check's ``not_applied`` pairs the call
    ``not_started`` (it did not take effect), where it would run again under recovery (None:
    ``outcome_unknown``)."""
    if tool is None or not tool.reconcile:
        return None
    if call.check is None:
        return Decision(call.dispatch_id, "reconcile", reason=f"{how} after its body started: ask the tool's reconcile check") if ask_checks else None
    if call.check == "not_applied":
        return _pair(call, "not_started", CHECKED_NOT_APPLIED, f"{how} after its body started; check: not applied", "check")
    return None  # "applied" is settled by the runtime as it records the verdict; "unknown" stays in doubt


def _by_check(call: SavedCall, tool: ToolNow | None, doubt: str, ask_checks: bool) -> Decision | None:
    """Where a started call would be in doubt, its reconcile check decides (None: no check to ask,
    or it could not tell, so the caller pairs ``outcome_unknown``)."""
    if tool is None or not tool.reconcile:
        return None
    if call.check is None:
        return Decision(call.dispatch_id, "reconcile", reason=f"{doubt}: ask the tool's reconcile check") if ask_checks else None
    if call.check != "not_applied":
        return None  # "applied" is settled by the runtime as it records the verdict; "unknown" stays in doubt
    why = f"{doubt}; check: not applied"
    if doubt.startswith("ordered after"):
        return _pair(call, "not_started", CHECKED_NOT_APPLIED + NOT_RUN_AGAIN_ORDERED, why, "check")
    if not tool.accepts(call.args):
        return _pair(call, "not_started", CHECKED_NOT_APPLIED + NOT_RUN_AGAIN_SCHEMA, why, "check")
    if call.attempts >= MAX_BODIES:
        return _pair(call, "replay_limit_reached", REPLAY_LIMIT_NOT_APPLIED, f"{why}; {call.attempts} bodies already started", "check")
    return Decision(call.dispatch_id, "run_again", reason=f"{why}: attempt {call.attempts + 1} of {MAX_BODIES}", decided_by="check")
