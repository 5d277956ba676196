"""Opening a run: the one place a run's row is written, whoever opens it.

Three callers open runs: an entry (``entries.open_run``), a remote child's first dispatch
(``children``) and a companion's turn (``companions``). Each wrote its own insert once, and they
drifted (a remote child's run carried no executor id, so audits and the wake's cancel sweep could
not tell which process admitted it). Here the gate and the row are one step: the run-start
compare-and-set on the session's version, then the row, with every column derived the same way.
"""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa

from ...ledger import runs as run_rows
from ...ledger import sessions as session_rows
from ...ledger.records import SessionRow
from ...ledger.runs import RunOpening

__all__ = ["RunOpening", "open_first_run", "open_run_row"]


def open_run_row(conn: sa.Connection, session: SessionRow, opening: RunOpening) -> bool:
    """Win ``session``'s run-start gate for ``opening.run_id`` and write the run's row; False if another entry won.

    ``session`` is the row as read before the claim (under its lock): the run's ``seq`` follows its
    ``run_count`` and its ``previous_run_id`` is the run it takes over from, its ``current_run_id``.
    """
    if not session_rows.claim_session(conn, session, opening.run_id, opening.status):
        return False
    run_rows.insert_run(conn, **run_rows.opened_run_values(
        opening, session_id=session["session_id"], agent_name=session["agent_name"],
        seq=int(session["run_count"]) + 1, previous_run_id=session["current_run_id"],
    ))
    return True


def open_first_run(conn: sa.Connection, *, session_id: str, agent_name: str, owner: str | None, opening: RunOpening) -> SessionRow | None:
    """Create session ``session_id`` with its first run, ``opening``; None if the id was taken (a
    concurrent start created it first, and won its first run).

    The session is inserted with the gate already won by the run (nobody else can hold a version of
    a row this transaction creates: no compare-and-set), and the two rows go in one statement on
    Postgres (``runs.insert_first_run``). The run's row is derived as ``open_run_row`` derives it,
    for a session with no run before it.
    """
    run = run_rows.opened_run_values(opening, session_id=session_id, agent_name=agent_name, seq=1, previous_run_id=None)
    session = session_rows.new_session_row(session_id, agent_name, owner=owner, claimed_by=(opening.run_id, opening.status))
    return cast(SessionRow, session) if run_rows.insert_first_run(conn, session, run) else None  # every column given: the row
