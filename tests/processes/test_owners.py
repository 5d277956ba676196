"""Session owners in the ledger: stamped at creation, inherited by every child, checked under the lock.

Owners are what the service authorizes by (docs/service.md, "Deploying"); these tests pin the
ledger side through the runtime on both databases: a remote child and a companion get their
parent's owner (delegation never widens who sees a session), and a start naming another owner's
session id is ``session_not_found`` and writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

import helix_dbos as hx
from tests.scenarios import family


@pytest.mark.usefixtures("fam")  # the family's tools write their effects under the test's folder
def test_children_and_companions_inherit_the_parent_owner(make_runtime: Any) -> None:
    rt = make_runtime(family.AGENTS)
    remote = rt.start("remote_boss", "tides explode", owner="alice").result(timeout=60)
    pal = rt.start("pal_boss", "one two", owner="bob").result(timeout=60)
    assert remote.status == "completed" and pal.status == "completed"
    children = [c.child_session_id for c in rt.session(remote.session_id).calls]
    (companion,) = {c.child_session_id for c in rt.session(pal.session_id).calls}
    assert rt.session(remote.session_id).owner == "alice" and [rt.session(c).owner for c in children] == ["alice", "alice"]
    assert rt.session(pal.session_id).owner == "bob" and rt.session(companion).owner == "bob"
    unowned = rt.start("local_boss", "hills").result(timeout=60)
    assert rt.session(unowned.session_id).owner is None

    sessions_before, runs_before = rt.reader.sessions(limit=1000), rt.reader.runs(pal.session_id)
    with pytest.raises(hx.SessionNotFoundError):
        rt.start("pal_boss", "mine now", session_id=pal.session_id, owner="mallory")
    # refused before the gate: nothing written
    assert rt.reader.sessions(limit=1000) == sessions_before and rt.reader.runs(pal.session_id) == runs_before
    turn = rt.start("pal_boss", "three", session_id=pal.session_id, owner="bob").result(timeout=60)
    assert turn.status == "completed" and turn.session_id == pal.session_id
