"""Every row of the seed's recovery and entries tables, as a unit test of the pure ``decide`` function."""

from __future__ import annotations

from typing import Any

import pytest

from helix_dbos.recovery import (
    MAX_BODIES,
    NOT_STARTED,
    OUTCOME_UNKNOWN,
    REPLAY_LIMIT_REACHED,
    RUN_STOPPED,
    Decision,
    SavedCall,
    ToolNow,
    decide,
    lanes,
)
from helix_dbos.recovery.lanes import lane_keys


def call(i: int, name: str = "t", *, kind: str = "tool", replay: str = "safe", status: str = "running", attempts: int = 1, **kw: Any) -> SavedCall:
    return SavedCall(dispatch_id=f"d{i}", position=i, tool_name=name, kind=kind, replay=replay, status=status, attempts=attempts, args={"k": "v"}, **kw)


def tools(**policies: str) -> dict[str, ToolNow]:
    return {name: ToolNow(name, replay, lambda args: isinstance(args, dict) and "k" in args) for name, replay in policies.items()}


SAFE = tools(t="safe", u="unsafe")


def one(c: SavedCall, now: dict[str, ToolNow] = SAFE, entry: str = "recover", profile: str = "full") -> Decision:
    return decide([c], now, entry, profile)[0]  # type: ignore[arg-type]


# --- the recovery table -----------------------------------------------------------------------


def test_pending_client_call_is_left_for_its_answer() -> None:
    d = one(call(0, "c", kind="client", status="pending", attempts=0, replay="unsafe"))
    assert d.action == "wait"


def test_pending_approval_call_is_left_for_its_answer() -> None:
    d = one(call(0, status="pending", attempts=0, requires_approval=True))
    assert d.action == "wait"


def test_approved_call_runs_its_first_body() -> None:
    d = one(call(0, status="pending", attempts=0, requires_approval=True, approved=True))
    assert d.action == "run"


def test_remote_subagent_call_reattaches_by_dispatch_id() -> None:
    for attempts in (0, 1, 5):
        assert one(call(0, "subagent__x", kind="remote", replay="unsafe", attempts=attempts)).action == "reattach"


def test_companion_call_reenters_the_child_phase() -> None:
    assert one(call(0, "subagent__c", kind="companion", replay="unsafe", attempts=1)).action == "reenter"


def test_safe_tool_runs_again_up_to_three_bodies() -> None:
    assert one(call(0, attempts=1)).action == "run_again"
    assert one(call(0, attempts=2)).action == "run_again"


def test_safe_tool_already_run_three_times_is_replay_limit_reached() -> None:
    d = one(call(0, attempts=MAX_BODIES))
    assert (d.action, d.status, d.note) == ("pair", "replay_limit_reached", REPLAY_LIMIT_REACHED)
    assert REPLAY_LIMIT_REACHED == "It will not be run again automatically"


def test_anything_else_is_outcome_unknown() -> None:
    d = one(call(0, "u", replay="unsafe"))
    assert (d.action, d.status, d.note) == ("pair", "outcome_unknown", OUTCOME_UNKNOWN)
    assert OUTCOME_UNKNOWN == "the tool may have run. Check whether it took effect before repeating it"


def test_a_body_that_never_started_runs_as_its_first_attempt() -> None:
    assert one(call(0, "u", replay="unsafe", attempts=0, status="saved")).action == "run"


def test_a_recorded_result_is_kept_never_doubted() -> None:
    for status in ("ok", "error", "denied"):
        assert one(call(0, "u", replay="unsafe", status=status)).action == "keep"


# --- the two order rules ----------------------------------------------------------------------


@pytest.mark.parametrize("first", ["outcome_unknown", "replay_limit_reached"])
def test_call_behind_a_doubted_call_of_its_group_is_outcome_unknown(first: str) -> None:
    doubted = call(0, "u", replay="unsafe", concurrency_group="g") if first == "outcome_unknown" else call(0, attempts=3, concurrency_group="g")
    behind = call(1, attempts=0, status="saved", concurrency_group="g")
    other = call(2, attempts=0, status="saved", concurrency_group="h")
    d = decide([doubted, behind, other], SAFE)
    assert d[0].status == first
    assert (d[1].action, d[1].status) == ("pair", "outcome_unknown")
    assert d[1].note is not None and d[1].note.startswith(OUTCOME_UNKNOWN)
    assert d[2].action == "run"


def test_call_behind_a_doubted_call_of_the_sequential_chain_is_outcome_unknown() -> None:
    d = decide([call(0, "u", replay="unsafe", sequential=True), call(1, attempts=1, sequential=True), call(2, attempts=1)], SAFE)
    assert [x.status for x in d[:2]] == ["outcome_unknown", "outcome_unknown"]
    assert d[2].action == "run_again"


def test_already_paired_doubt_still_blocks_its_lane() -> None:
    d = decide([call(0, status="outcome_unknown", concurrency_group="g"), call(1, attempts=1, concurrency_group="g")], SAFE)
    assert d[0].action == "keep" and d[1].status == "outcome_unknown"


def test_order_is_by_position_not_list_order() -> None:
    d = decide([call(1, attempts=1, sequential=True), call(0, "u", replay="unsafe", sequential=True)], SAFE)
    assert {x.dispatch_id: x.status for x in d} == {"d0": "outcome_unknown", "d1": "outcome_unknown"}


def test_a_call_behind_a_waiting_call_waits_too() -> None:
    d = decide([call(0, status="pending", attempts=0, requires_approval=True, concurrency_group="g"), call(1, attempts=0, status="saved", concurrency_group="g")], SAFE)
    assert [x.action for x in d] == ["wait", "wait"]


def test_local_subagent_is_outcome_unknown() -> None:
    d = one(call(0, "subagent__l", kind="local", replay="unsafe", attempts=1))
    assert d.status == "outcome_unknown"


# --- policy checked twice, schema re-validated -------------------------------------------------


def test_saved_policy_unsafe_wins_over_safe_now() -> None:
    assert one(call(0, replay="unsafe")).status == "outcome_unknown"


def test_policy_changed_to_unsafe_makes_it_outcome_unknown() -> None:
    assert one(call(0), tools(t="unsafe")).status == "outcome_unknown"


def test_removed_tool_makes_it_outcome_unknown() -> None:
    assert one(call(0), {}).status == "outcome_unknown"


def test_arguments_failing_the_current_schema_make_it_outcome_unknown() -> None:
    strict = {"t": ToolNow("t", "safe", lambda args: False)}
    assert one(call(0), strict).status == "outcome_unknown"


# --- the entries table ------------------------------------------------------------------------


def test_redirect_pairs_every_open_call_and_runs_nothing() -> None:
    calls = [call(0, attempts=1), call(1, "u", replay="unsafe", attempts=0, status="saved"), call(2, status="ok"),
             call(3, "c", kind="client", status="pending", attempts=0), call(4, status="pending", attempts=0, requires_approval=True)]
    d = decide(calls, SAFE, "redirect")
    assert [(x.action, x.status) for x in d] == [
        ("pair", "outcome_unknown"), ("pair", "not_started"), ("keep", None), ("pair", "outcome_unknown"), ("pair", "not_started"),
    ]
    assert d[1].note == NOT_STARTED


def test_stop_pairs_the_rest_run_stopped_and_keeps_finished() -> None:
    d = decide([call(0, status="ok"), call(1, attempts=0), call(2, status="pending", attempts=0, kind="client")], SAFE, "stop")
    assert [(x.action, x.status) for x in d] == [("keep", None), ("pair", "run_stopped"), ("pair", "run_stopped")]
    assert d[1].note == RUN_STOPPED


STOP_TABLE: list[tuple[str, SavedCall, str, str | None]] = [
    # (what, the saved call, its stop status, what proved it)
    ("never started", call(0, "u", replay="unsafe", attempts=0), "run_stopped", None),
    ("awaiting its client", call(0, "c", kind="client", status="pending", attempts=0), "run_stopped", None),
    ("awaiting approval", call(0, "u", replay="unsafe", status="pending", attempts=0, requires_approval=True), "run_stopped", None),
    ("started unsafe, no result", call(0, "u", replay="unsafe", attempts=1), "outcome_unknown", None),
    ("started safe, no result", call(0, "t", attempts=1), "outcome_unknown", None),
    ("started twice, no result", call(0, "t", attempts=2), "outcome_unknown", None),
    ("started transactional", call(0, "u", replay="unsafe", attempts=1, transactional=True), "not_started", "database"),
    ("started reconciled, no verdict", call(0, "r", replay="unsafe", attempts=1), "outcome_unknown", None),
    ("started reconciled, not applied", call(0, "r", replay="unsafe", attempts=1, check="not_applied"), "not_started", "check"),
    ("started reconciled, unknown", call(0, "r", replay="unsafe", attempts=1, check="unknown"), "outcome_unknown", None),
    ("started local child", call(0, "t", kind="local", attempts=1), "outcome_unknown", None),
    ("started remote child", call(0, "t", kind="remote", attempts=1), "outcome_unknown", None),
]


@pytest.mark.parametrize(("what", "saved", "status", "proved_by"), STOP_TABLE, ids=[row[0] for row in STOP_TABLE])
@pytest.mark.parametrize("ask_checks", [True, False])
def test_a_stop_says_run_stopped_only_of_a_call_whose_body_never_started(
    what: str, saved: SavedCall, status: str, proved_by: str | None, ask_checks: bool
) -> None:
    """A body that started and left no result may have taken effect, so a stop (or
    a DBOS cancel, settled as one) of a run whose process died mid-body answers it as a redirect
    would, never "stopped before it finished; not completed". A stop asks no check."""
    (d,) = decide([saved], CHECKED, "stop", ask_checks=ask_checks)
    assert (d.action, d.status, d.decided_by) == ("pair", status, proved_by), d
    if status == "outcome_unknown":
        assert d.note == OUTCOME_UNKNOWN
    for profile in ("full", "dbos_compat"):  # the seed's DBOS profile is no different for a stop
        (p,) = decide([saved], CHECKED, "stop", profile, ask_checks)  # type: ignore[arg-type]
        assert p.status == (status if profile == "full" or proved_by != "check" else "outcome_unknown"), (profile, p)


def test_retry_reopens_the_failed_runs_pairings_then_recovers() -> None:
    failed = [call(0, status="outcome_unknown", paired_by="run_failed", attempts=1), call(1, status="not_started", paired_by="run_failed", attempts=0),
              call(2, "u", replay="unsafe", status="outcome_unknown", paired_by="run_failed", attempts=1), call(3, status="outcome_unknown", paired_by="recovery", attempts=1)]
    d = decide(failed, SAFE, "retry")
    assert [x.action for x in d] == ["run_again", "run", "pair", "keep"]
    assert d[2].status == "outcome_unknown"


def test_retry_leaves_a_failed_runs_dropped_answers_dropped() -> None:
    dropped = [call(0, "c", kind="client", status="outcome_unknown", paired_by="run_failed", attempts=0),
               call(1, status="not_started", paired_by="run_failed", attempts=0, requires_approval=True)]
    assert [x.action for x in decide(dropped, SAFE, "retry")] == ["keep", "keep"]


def test_recovery_never_touches_a_pending_answer_even_on_retry() -> None:
    assert one(call(0, "c", kind="client", status="pending", attempts=0), entry="retry").action == "wait"


# --- the dbos_compat profile -------------------------------------------------------------------


def test_dbos_compat_recovers_remote_children_only() -> None:
    assert one(call(0, "subagent__x", kind="remote", replay="unsafe"), profile="dbos_compat").action == "reattach"
    assert one(call(0, attempts=1), profile="dbos_compat").status == "outcome_unknown"
    assert one(call(0, "subagent__c", kind="companion", replay="unsafe"), profile="dbos_compat").status == "outcome_unknown"


# --- lanes ------------------------------------------------------------------------------------


def test_lanes_join_groups_and_the_chain() -> None:
    calls = [call(0, concurrency_group="g"), call(1), call(2, sequential=True), call(3, concurrency_group="g", sequential=True), call(4, concurrency_group="h")]
    assert [[c.position for c in ln] for ln in lanes(calls)] == [[0, 2, 3], [1], [4]]


#: Every order a call can be under: no rule, a group (two names), the chain, and a group with the chain.
ORDERS: list[tuple[str | None, bool]] = [(None, False), ("g", False), ("h", False), (None, True), ("g", True), ("h", True)]
#: Kinds whose unanswered call recovery orders (a client call only ever waits for its answer).
ORDERED_KINDS = ["tool", "local", "remote", "companion"]


def _held_by(first: SavedCall, behind: SavedCall) -> bool:
    """Whether ``decide`` holds ``behind`` back because of ``first`` (doubt or wait, whichever it is)."""
    reason = decide([first, behind], SAFE)[1].reason
    return reason in ("ordered after a call in doubt", "ordered after a call awaiting an answer")


def _lane_of(c: SavedCall, *calls: SavedCall) -> set[int]:
    """The positions in the lane ``lanes`` runs ``c`` in, among ``calls``: what really runs before it."""
    return next({x.position for x in ln} for ln in lanes(list(calls)) if c in ln)


@pytest.mark.parametrize("kind", ORDERED_KINDS)
@pytest.mark.parametrize("first_order", ORDERS)
@pytest.mark.parametrize("behind_order", ORDERS)
@pytest.mark.parametrize("first_state", ["in_doubt", "waiting"])
def test_decide_holds_back_exactly_the_calls_its_lane_runs_after(
    kind: str, first_order: tuple[str | None, bool], behind_order: tuple[str | None, bool], first_state: str
) -> None:
    """The lane key is one rule: a call is doubted (or held waiting) by an earlier call exactly when
    the lanes run it after that call, for every pair of orders and every kind of the later call."""
    group, seq = first_order
    if first_state == "in_doubt":
        first = call(0, "u", replay="unsafe", concurrency_group=group, sequential=seq)
    else:
        first = call(0, status="pending", attempts=0, requires_approval=True, concurrency_group=group, sequential=seq)
    behind = call(1, "subagent__x" if kind != "tool" else "t", kind=kind, attempts=0, status="saved",
                  concurrency_group=behind_order[0], sequential=behind_order[1])
    assert _held_by(first, behind) == (0 in _lane_of(behind, first, behind)), (first, behind)


@pytest.mark.parametrize("orders", [(a, b, c) for a in ORDERS for b in ORDERS for c in ORDERS])
def test_a_call_decide_holds_back_always_runs_after_the_call_that_held_it(orders: tuple[tuple[str | None, bool], ...]) -> None:
    """With three calls the lanes may join orders a call is not under (a call in a group and the chain
    joins both): decide never holds back a call that its lane does not run after the call in doubt."""
    first = call(0, "u", replay="unsafe", concurrency_group=orders[0][0], sequential=orders[0][1])
    middle = call(1, attempts=0, status="saved", concurrency_group=orders[1][0], sequential=orders[1][1])
    last = call(2, attempts=0, status="saved", concurrency_group=orders[2][0], sequential=orders[2][1])
    d = decide([first, middle, last], SAFE)
    held = [c for i, c in ((1, middle), (2, last)) if d[i].reason == "ordered after a call in doubt"]
    for c in held:
        assert 0 in _lane_of(c, first, middle, last), (orders, c.position)


def test_lane_keys_are_the_group_and_the_chain() -> None:
    assert lane_keys(None, False) == ()
    assert lane_keys("g", False) == ("group:g",)
    assert lane_keys(None, True) == ("sequential",)
    assert lane_keys("g", True) == ("group:g", "sequential")


# --- transactional tools: no committed result means no effect (decided by the database) -------


def test_transactional_call_without_a_result_runs_again_even_when_unsafe() -> None:
    for attempts in (1, 2):
        d = one(call(0, "u", replay="unsafe", attempts=attempts, transactional=True))
        assert (d.action, d.decided_by) == ("run_again", "database"), d


def test_transactional_call_stops_after_three_bodies_saying_nothing_took_effect() -> None:
    d = one(call(0, "u", replay="unsafe", attempts=MAX_BODIES, transactional=True))
    assert (d.action, d.status, d.decided_by) == ("pair", "replay_limit_reached", "database")
    assert d.note is not None and d.note.startswith(REPLAY_LIMIT_REACHED) and "Nothing took effect" in d.note


def test_transactional_limit_puts_nothing_behind_it_in_doubt() -> None:
    first = call(0, "u", replay="unsafe", attempts=MAX_BODIES, transactional=True, concurrency_group="g")
    second = call(1, "t", attempts=0, status="saved", concurrency_group="g")
    assert [d.action for d in decide([first, second], SAFE)] == ["pair", "run"]
    kept = call(0, "u", replay="unsafe", status="replay_limit_reached", attempts=MAX_BODIES, transactional=True, concurrency_group="g")
    assert [d.action for d in decide([kept, second], SAFE)] == ["keep", "run"]


def test_transactional_call_is_never_outcome_unknown_under_a_redirect() -> None:
    d = one(call(0, "u", replay="unsafe", transactional=True), entry="redirect")
    assert (d.status, d.decided_by) == ("not_started", "database") and "did not take effect" in (d.note or "")


def test_transactional_call_that_can_no_longer_run_is_not_started_not_in_doubt() -> None:
    removed = one(call(0, "gone", replay="unsafe", transactional=True))
    assert (removed.status, removed.decided_by) == ("not_started", "database")
    changed = one(SavedCall("d0", 0, "u", "tool", "unsafe", "running", 1, args={"other": 1}, transactional=True))
    assert changed.status == "not_started" and "schema" in (changed.note or "")


def test_started_transactional_call_behind_doubt_did_not_take_effect() -> None:
    doubt = call(0, "u", replay="unsafe", sequential=True)
    tx = call(1, "u", replay="unsafe", sequential=True, transactional=True)
    d = decide([doubt, tx], SAFE)[1]
    assert (d.status, d.decided_by) == ("not_started", "database")


def test_a_transactional_call_whose_body_committed_its_own_transaction_is_never_run_again() -> None:
    """Its marker is committed without a result (``escaped``): its effect may exist, under every entry,
    whatever its replay policy, and what is ordered after it waits on that doubt."""
    for entry in ("recover", "redirect", "stop", "retry"):
        for replay in ("safe", "unsafe"):
            d = one(call(0, "t" if replay == "safe" else "u", replay=replay, transactional=True, escaped=True), entry=entry)
            assert (d.action, d.status, d.decided_by) == ("pair", "outcome_unknown", None), (entry, replay, d)
            assert d.note is not None and d.note.startswith("transaction_escaped:") and OUTCOME_UNKNOWN in d.note
    escaped = call(0, "u", replay="unsafe", sequential=True, transactional=True, escaped=True)
    behind = call(1, "t", attempts=0, status="saved", sequential=True)
    assert [(d.action, d.status) for d in decide([escaped, behind], SAFE)] == [("pair", "outcome_unknown"), ("pair", "outcome_unknown")]


def test_a_call_whose_body_once_ran_outside_a_transaction_is_judged_normally() -> None:
    assert one(call(0, "u", replay="unsafe", transactional=False)).status == "outcome_unknown"


# --- reconcile checks: ask the outside system before answering outcome_unknown -------------------

CHECKED = {**SAFE, "r": ToolNow("r", "unsafe", lambda args: isinstance(args, dict) and "k" in args, reconcile=True)}


def test_started_unsafe_call_with_a_check_is_reconciled_before_outcome_unknown() -> None:
    d = one(call(0, "r", replay="unsafe"), CHECKED)
    assert d.action == "reconcile" and d.decided_by is None


def test_check_not_applied_runs_again_within_the_limit_even_if_unsafe() -> None:
    d = one(call(0, "r", replay="unsafe", attempts=2, check="not_applied"), CHECKED)
    assert (d.action, d.decided_by) == ("run_again", "check")
    limit = one(call(0, "r", replay="unsafe", attempts=MAX_BODIES, check="not_applied"), CHECKED)
    assert (limit.status, limit.decided_by) == ("replay_limit_reached", "check")
    assert "Nothing took effect" in (limit.note or "")


def test_check_that_cannot_tell_leaves_outcome_unknown() -> None:
    d = one(call(0, "r", replay="unsafe", check="unknown"), CHECKED)
    assert (d.status, d.note, d.decided_by) == ("outcome_unknown", OUTCOME_UNKNOWN, None)
    assert "could not tell" in d.reason


def test_no_check_and_never_started_are_not_reconciled() -> None:
    assert one(call(0, "u", replay="unsafe"), CHECKED).status == "outcome_unknown"  # no check defined
    assert one(call(0, "r", replay="unsafe", attempts=0, status="saved"), CHECKED).action == "run"  # provably never started
    assert one(call(0, "r", replay="unsafe", attempts=0, status="saved"), CHECKED, entry="redirect").status == "not_started"


def test_a_redirect_asks_the_check_before_pairing_a_started_call_and_pairs_by_its_verdict() -> None:
    started = call(0, "r", replay="unsafe")
    assert one(started, CHECKED, entry="redirect").action == "reconcile"
    # the runtime asked already (or asks nothing): a call without a verdict is paired outcome_unknown
    final = decide([started], CHECKED, "redirect", ask_checks=False)[0]
    assert (final.action, final.status, final.decided_by) == ("pair", "outcome_unknown", None)
    # not applied: a redirect runs no body, so the call did not take effect and is not_started
    d = one(call(0, "r", replay="unsafe", check="not_applied"), CHECKED, entry="redirect")
    assert (d.status, d.decided_by) == ("not_started", "check") and "did not take effect" in (d.note or "")
    unknown = one(call(0, "r", replay="unsafe", check="unknown"), CHECKED, entry="redirect")
    assert (unknown.status, unknown.decided_by) == ("outcome_unknown", None) and "could not tell" in unknown.reason
    # no check, or the seed's DBOS profile: outcome_unknown as before, nothing to ask
    assert one(call(0, "u", replay="unsafe"), CHECKED, entry="redirect").status == "outcome_unknown"
    assert one(started, CHECKED, entry="redirect", profile="dbos_compat").status == "outcome_unknown"
    # a stop asks nobody: a started call without a verdict is outcome_unknown, never run_stopped
    assert (one(started, CHECKED, entry="stop").action, one(started, CHECKED, entry="stop").status) == ("pair", "outcome_unknown")


def test_without_asking_no_decision_is_reconcile() -> None:
    behind = call(1, "r", replay="unsafe", concurrency_group="g")
    doubt = call(0, "u", replay="unsafe", concurrency_group="g")
    for entry in ("recover", "retry", "redirect"):
        actions = [d.action for d in decide([doubt, behind, call(2, "r", replay="unsafe")], CHECKED, entry, ask_checks=False)]  # type: ignore[arg-type]
        assert "reconcile" not in actions, (entry, actions)


def test_an_undecided_check_holds_its_lane_and_a_decided_one_frees_it() -> None:
    first = call(0, "r", replay="unsafe", sequential=True)
    behind = call(1, "t", status="saved", attempts=0, sequential=True)
    assert [d.action for d in decide([first, behind], CHECKED)] == ["reconcile", "pair"]
    # applied: the runtime settled it ok, so the call ordered after it runs
    applied = call(0, "r", replay="unsafe", status="ok", sequential=True, check="applied")
    assert [d.action for d in decide([applied, behind], CHECKED)] == ["keep", "run"]
    # not applied: it runs again first, and the call behind it after
    not_applied = call(0, "r", replay="unsafe", sequential=True, check="not_applied")
    assert [d.action for d in decide([not_applied, behind], CHECKED)] == ["run_again", "run"]


def test_started_reconciled_call_behind_doubt_is_checked_too() -> None:
    doubt = call(0, "u", replay="unsafe", concurrency_group="g")
    behind = call(1, "r", replay="unsafe", concurrency_group="g")
    assert decide([doubt, behind], CHECKED)[1].action == "reconcile"
    not_applied = call(1, "r", replay="unsafe", concurrency_group="g", check="not_applied")
    d = decide([doubt, not_applied], CHECKED)[1]
    assert (d.status, d.decided_by) == ("not_started", "check") and "ordered after" in (d.note or "")
