"""Session owners in the ledger: stamped at creation, inherited by every child, checked under the lock.

Owners are what the service authorizes by (docs/service.md, "Deploying"); these tests pin the
ledger side through the runtime on both databases: a remote child and a companion get their
parent's owner (delegation never widens who sees a session), and a start naming another owner's
session id is ``session_not_found`` and writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from helix_dbos.errors import SessionNotFoundError
from helix_dbos.ledger import tables as t
from tests.support.familykit import Family
from tests.scenarios import family


def test_children_and_companions_inherit_the_parent_owner(make_runtime: Any, fam: Family) -> None:
    rt = make_runtime(family.AGENTS)
    remote = rt.start("remote_boss", "tides explode", owner="alice").result(timeout=60)
    pal = rt.start("pal_boss", "one two", owner="bob").result(timeout=60)
    assert remote.status == "completed" and pal.status == "completed"
    owners = {r["session_id"]: r["owner"] for r in fam.rows(t.sessions)}
    children = [c.child_session_id for c in rt.session(remote.session_id).calls]
    (companion,) = {c.child_session_id for c in rt.session(pal.session_id).calls}
    assert owners[remote.session_id] == "alice" and [owners[c] for c in children] == ["alice", "alice"]
    assert owners[pal.session_id] == "bob" and owners[companion] == "bob"
    unowned = rt.start("local_boss", "hills").result(timeout=60)
    assert owners.get(unowned.session_id) is None and fam.rows(t.sessions, t.sessions.c.session_id == unowned.session_id)[0]["owner"] is None

    runs_before = len(fam.rows(t.runs))
    with pytest.raises(SessionNotFoundError):
        rt.start("pal_boss", "mine now", session_id=pal.session_id, owner="mallory")
    assert len(fam.rows(t.runs)) == runs_before  # refused before the gate: nothing written
    turn = rt.start("pal_boss", "three", session_id=pal.session_id, owner="bob").result(timeout=60)
    assert turn.status == "completed" and turn.session_id == pal.session_id
