"""The ledger's words are one vocabulary: every named set is drawn from its Literal, and "awaits an
answer" means the same to recovery as to the entries and the pending list (all one predicate)."""

from __future__ import annotations

from typing import get_args

import pytest

from helix_dbos.ledger import statuses as st
from helix_dbos.recovery import SavedCall, decide


def test_every_named_set_is_drawn_from_its_literal() -> None:
    calls, runs, kinds, entries = (set(get_args(x)) for x in (st.CallStatus, st.RunStatus, st.CallKind, st.EntryKind))
    assert st.CALL_SETTLED | st.CALL_UNRESOLVED | {"pending"} == calls  # every status is settled, unresolved or pending
    assert not st.CALL_SETTLED & st.CALL_UNRESOLVED
    assert st.CALL_IN_DOUBT <= st.CALL_SETTLED
    assert st.RUN_TERMINAL <= st.RUN_AT_REST <= runs and runs - st.RUN_AT_REST == st.RUN_LIVE == {"queued", "running"}
    assert st.BODY_KINDS <= kinds
    assert st.REDIRECTING_ENTRIES <= entries


@pytest.mark.parametrize(
    ("kind", "requires_approval", "approved", "awaits"),
    [
        ("client", False, None, True),
        ("tool", True, None, True),
        ("tool", True, True, False),  # approved: its body may run
        ("tool", False, None, False),
        ("remote", True, None, True),
    ],
)
def test_awaits_an_answer(kind: str, requires_approval: bool, approved: bool | None, awaits: bool) -> None:
    assert st.awaits_answer(kind, requires_approval, approved) is awaits


@pytest.mark.parametrize("kind", get_args(st.CallKind))
@pytest.mark.parametrize("requires_approval", [False, True])
@pytest.mark.parametrize("approved", [None, True])
def test_recovery_waits_on_a_pending_call_exactly_when_it_awaits_an_answer(kind: str, requires_approval: bool, approved: bool | None) -> None:
    pending = SavedCall("d0", 0, "t", kind, "safe", "pending", requires_approval=requires_approval, approved=approved)  # type: ignore[arg-type]
    (decision,) = decide([pending], {})
    assert (decision.action == "wait") is st.awaits_answer(kind, requires_approval, approved), decision
