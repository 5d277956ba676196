"""The recovery contract as one pure function.

``decide`` takes what the ledger saved about one step (its calls, each with the policy its tool had
when the model asked for it, the number of bodies started and the answer if any), the tools as they
are *now*, and the kind of entry; it returns one decision per call. No I/O: the runtime reads the
ledger, calls this, and writes what it says, so every rule of the seed's tables is a unit test here.

The rules, in the order they apply to a call:

1. A settled call keeps its answer (a body that returned and was recorded is never doubted).
2. A pending client or approval call waits for its answer; an answered approval runs its first body.
   A call ordered after a waiting call (same lane, see 5) waits with it.
3. A stop pairs every unsettled call ``run_stopped``.
4. A redirecting entry (a new message) pairs every unsettled call before the message:
   ``not_started`` when no body ever started, else ``outcome_unknown``; nothing runs again.
5. A call ordered after an in-doubt call (its ``concurrency_group``, or the sequential chain) is
   ``outcome_unknown`` too: it was written to run after that call's effect.
6. A call whose body provably never started runs as its first attempt.
7. Remote children are re-attached by dispatch id (or started once under it); companions re-enter
   the child phase; a local child died with its parent, so it is ``outcome_unknown``.
8. A tool body that started but left no recorded result runs again only when the saved policy and
   the tool as it is now both say ``safe``, the saved arguments still pass the tool's schema, and
   fewer than 3 bodies have started; otherwise ``replay_limit_reached`` (3 bodies) or
   ``outcome_unknown``.

Under ``profile="dbos_compat"`` (the seed's DBOS row) only remote children recover; every other
interrupted call is ``outcome_unknown``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..ledger.statuses import CALL_IN_DOUBT, CALL_SETTLED
from .texts import (
    NOT_STARTED,
    ORDERED_AFTER_DOUBT,
    OUTCOME_UNKNOWN,
    REPLAY_LIMIT_REACHED,
    RUN_STOPPED,
)

MAX_BODIES: Final = 3

Entry = Literal["recover", "redirect", "stop", "retry"]
"""How the caller arrived at the saved step.

``recover``: a wake, ``resume(mode="continue")`` or ``resume(mode="from_checkpoint")``.
``retry``: ``retry()`` without a message, which first undoes the failed run's own pairings.
``redirect``: any entry that carries a new message. ``stop``: an interrupt or abort.
"""

Profile = Literal["full", "dbos_compat"]

Action = Literal["keep", "run", "run_again", "reattach", "reenter", "wait", "pair"]


@dataclass(frozen=True, slots=True)
class SavedCall:
    """One call of a saved step, as the ledger holds it."""

    dispatch_id: str
    position: int
    tool_name: str
    kind: str  # tool | client | remote | local | companion | finish | invalid
    replay: str  # the policy saved on the call's row
    status: str
    attempts: int = 0
    args: Any = None
    concurrency_group: str | None = None
    sequential: bool = False
    requires_approval: bool = False
    approved: bool | None = None
    paired_by: str | None = None


@dataclass(frozen=True, slots=True)
class ToolNow:
    """A tool as the running code defines it, at recovery time (possibly after a deploy)."""

    name: str
    replay: str
    accepts: Callable[[Any], bool]


@dataclass(frozen=True, slots=True)
class Decision:
    dispatch_id: str
    action: Action
    status: str | None = None  # the status to pair with, when action == "pair"
    note: str | None = None  # what the model is told, when paired
    reason: str = ""  # why, for the audit trail and the event stream


def _pair(call: SavedCall, status: str, note: str, reason: str) -> Decision:
    return Decision(call.dispatch_id, "pair", status, note, reason)


def _lanes_of(call: SavedCall) -> list[str]:
    lanes = []
    if call.concurrency_group:
        lanes.append(f"group:{call.concurrency_group}")
    if call.sequential:
        lanes.append("sequential")
    return lanes


def _awaits_answer(call: SavedCall) -> bool:
    """A client call, or an approval-gated call nobody has approved: only an answer may move it."""
    return call.kind == "client" or (call.requires_approval and call.approved is not True)


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
) -> list[Decision]:
    """One decision per call, in position order. See the module docstring for the rules."""
    decisions: list[Decision] = []
    doubted_lanes: set[str] = set()
    waiting_lanes: set[str] = set()
    for call in sorted(calls, key=lambda c: c.position):
        decision = _decide_one(call, tools_now, entry, profile, doubted_lanes, waiting_lanes)
        if decision.action == "wait":
            waiting_lanes.update(_lanes_of(call))
        in_doubt = (decision.action == "pair" and decision.status in CALL_IN_DOUBT) or (
            decision.action == "keep" and call.status in CALL_IN_DOUBT
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
) -> Decision:
    if not _unsettled(call, entry):
        return Decision(call.dispatch_id, "keep", reason="settled")

    never_started = call.attempts == 0
    waiting_answer = call.status == "pending"

    if entry == "stop":
        return _pair(call, "run_stopped", RUN_STOPPED, "stopped")

    if entry == "redirect":
        if waiting_answer and call.kind == "client":
            # The client may have acted on it already; only the client knows.
            return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "redirected while awaiting the client")
        if never_started:
            return _pair(call, "not_started", NOT_STARTED, "redirected before its body started")
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "redirected after its body started")

    if waiting_answer and _awaits_answer(call):
        return Decision(call.dispatch_id, "wait", reason="awaiting an answer")

    if any(lane in waiting_lanes for lane in _lanes_of(call)):
        return Decision(call.dispatch_id, "wait", reason="ordered after a call awaiting an answer")

    if any(lane in doubted_lanes for lane in _lanes_of(call)):
        note = OUTCOME_UNKNOWN + (ORDERED_AFTER_DOUBT if never_started else "")
        return _pair(call, "outcome_unknown", note, "ordered after a call in doubt")

    if call.kind == "remote":
        return Decision(call.dispatch_id, "reattach", reason="remote child: re-attach by dispatch id")

    if never_started:
        return Decision(call.dispatch_id, "run", reason="no body ever started")

    if profile == "dbos_compat":
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "dbos_compat recovers remote children only")

    if call.kind == "companion":
        return Decision(call.dispatch_id, "reenter", reason="companion: re-enter the child phase")

    if call.kind == "local":
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "local child died with its parent")

    tool = tools_now.get(call.tool_name)
    if tool is None:
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "tool no longer defined")
    if call.replay != "safe":
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "saved policy is unsafe")
    if tool.replay != "safe":
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "tool is unsafe now")
    if not tool.accepts(call.args):
        return _pair(call, "outcome_unknown", OUTCOME_UNKNOWN, "saved arguments fail the current schema")
    if call.attempts >= MAX_BODIES:
        return _pair(call, "replay_limit_reached", REPLAY_LIMIT_REACHED, f"{call.attempts} bodies already started")
    return Decision(call.dispatch_id, "run_again", reason=f"safe: attempt {call.attempts + 1} of {MAX_BODIES}")
