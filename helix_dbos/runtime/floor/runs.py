"""Opening a run: the one place a run's row is written, whoever opens it.

Three callers open runs: an entry (``entries.open_run``), a remote child's first dispatch
(``children``) and a companion's turn (``companions``). Each wrote its own insert once, and they
drifted (a remote child's run carried no executor id, so audits and the wake's cancel sweep could
not tell which process admitted it). Here the gate and the row are one step: the run-start
compare-and-set on the session's version, then the row, with every column derived the same way.
"""

from __future__ import annotations

import sqlalchemy as sa

from ...ledger import runs as run_rows
from ...ledger import sessions as session_rows
from ...ledger.records import SessionRow
from ...ledger.statuses import EntryKind


def open_run_row(
    conn: sa.Connection,
    session: SessionRow,
    *,
    run_id: str,
    entry: EntryKind,
    message: str | None,
    max_steps: int,
    recovery: str,
    executor_id: str | None,
    checkpoint_id: str | None = None,
    queued: bool = False,
    created: bool = False,
) -> bool:
    """Win ``session``'s run-start gate for ``run_id`` and write the run's row; False if another entry won.

    ``session`` is the row as read before the claim (under its lock): the run's ``seq`` follows its
    ``run_count`` and its ``previous_run_id`` is the run it takes over from, its ``current_run_id``.
    ``executor_id`` is the process that admits the run (not necessarily the one that will run it).
    ``queued``: the run waits on a queue for a worker (``queued``, not ``running``, until one takes it).
    ``created``: this transaction inserted ``session`` with the gate already won by ``run_id``
    (``insert_session(claimed_by=...)``): there is no compare-and-set left to win, and the run is
    the session's first.
    """
    status = "queued" if queued else "running"
    if created:
        assert session["current_run_id"] == run_id and session["status"] == status and session["run_count"] == 1
    elif not session_rows.claim_session(conn, session, run_id, status):
        return False
    run_rows.insert_run(
        conn,
        run_id=run_id,
        session_id=session["session_id"],
        seq=1 if created else int(session["run_count"]) + 1,
        agent_name=session["agent_name"],
        entry=entry,
        entry_message=message,
        checkpoint_id=checkpoint_id,
        previous_run_id=None if created else session["current_run_id"],
        max_steps=max_steps,
        recovery=recovery,
        executor_id=executor_id,
        status=status,
    )
    return True
