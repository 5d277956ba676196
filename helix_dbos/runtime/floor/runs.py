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
) -> bool:
    """Win ``session``'s run-start gate for ``run_id`` and write the run's row; False if another entry won.

    ``session`` is the row as read before the claim (under its lock): the run's ``seq`` follows its
    ``run_count`` and its ``previous_run_id`` is the run it takes over from, its ``current_run_id``.
    ``executor_id`` is the process that admits the run (not necessarily the one that will run it).
    ``queued``: the run waits on a queue for a worker (``queued``, not ``running``, until one takes it).
    """
    status = "queued" if queued else "running"
    if not session_rows.claim_session(conn, session, run_id, status):
        return False
    run_rows.insert_run(
        conn,
        run_id=run_id,
        session_id=session["session_id"],
        seq=int(session["run_count"]) + 1,
        agent_name=session["agent_name"],
        entry=entry,
        entry_message=message,
        checkpoint_id=checkpoint_id,
        previous_run_id=session["current_run_id"],
        max_steps=max_steps,
        recovery=recovery,
        executor_id=executor_id,
        status=status,
    )
    return True


def open_first_run(
    conn: sa.Connection,
    *,
    session_id: str,
    agent_name: str,
    owner: str | None,
    run_id: str,
    entry: EntryKind,
    message: str | None,
    max_steps: int,
    recovery: str,
    executor_id: str | None,
    checkpoint_id: str | None = None,
    queued: bool = False,
) -> SessionRow | None:
    """Create session ``session_id`` with its first run ``run_id``; None if the id was taken (a
    concurrent start created it first, and won its first run).

    The session is inserted with the gate already won by the run (nobody else can hold a version of
    a row this transaction creates: no compare-and-set), and the two rows go in one statement on
    Postgres (``runs.insert_first_run``). The run's columns are derived as
    ``open_run_row`` derives them, for a session with no run before it.
    """
    status = "queued" if queued else "running"
    run = run_rows.run_values(
        run_id=run_id, session_id=session_id, seq=1, agent_name=agent_name, entry=entry, entry_message=message,
        checkpoint_id=checkpoint_id, previous_run_id=None, max_steps=max_steps, recovery=recovery, executor_id=executor_id, status=status,
    )
    session = session_rows.new_session_row(session_id, agent_name, owner=owner, claimed_by=(run_id, status))
    return cast(SessionRow, session) if run_rows.insert_first_run(conn, session, run) else None  # every column given: the row
