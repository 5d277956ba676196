"""An entry's transaction (a start, an answer, a stop) through a store outage, exactly once; what
every entry's input is checked for before it; and the release of a run whose workflow never started.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa

from ...definitions.inputs import check_text
from ...errors import ValidationError
from ...ledger.runs import end_run, get_run
from ...ledger.statuses import RUN_LIVE
from ..floor.store_retry import retrying_sync

T = TypeVar("T")


def check_entry_input(message: str | None, checkpoint_id: str | None) -> None:
    """What an entry takes besides the session id: refused before the gate, so nothing is written.
    A message, where one is given, is not empty (the API's ``minLength: 1``): an empty turn would
    be stored and sent to the model as if the user had said something."""
    check_text("message", message)
    if message == "":
        raise ValidationError("the message must not be empty", detail={"field": "message"})
    check_text("checkpoint_id", checkpoint_id, 80)


def entry_transaction(engine: sa.Engine, store_retry_window: float, what: str, fn: Callable[[sa.Connection], T],
                      applied: Callable[[sa.Connection], T | None]) -> T:
    """``fn`` (an entry's, an answer's or a stop's transaction) through a store outage, exactly once.

    Tried again for ``store_retry_window`` on a transient error, as the runs' transactions and
    the reads are; past it ``StoreUnavailableError`` (``store_unavailable``), never the driver's
    error. A commit whose acknowledgement was lost may have committed, and applying the entry a
    second time would open a second run, or refuse its own run as ``session_running``. So each
    entry mints, before its first try, the ids its rows are written under (the run id, a new
    session's id, the answer's or the stop's time), and every try after the first asks
    ``applied(conn)`` first: the outcome of an earlier try that committed, read back from those
    rows, or None. The first try, the only one almost every entry makes, writes nothing more
    than the entry itself.
    """
    tried = False

    def attempt() -> T:
        nonlocal tried
        with engine.begin() as conn:
            if tried:
                done = applied(conn)
                if done is not None:  # the earlier try committed; only its acknowledgement was lost
                    return done
            tried = True
            return fn(conn)

    return retrying_sync(what, attempt, store_retry_window)


def release(engine: sa.Engine, store_retry_window: float, run_id: str, failed: str) -> None:
    """End ``run_id`` ``start_failed``, if it is still live (its workflow never started): a retry
    after a lost acknowledgement, or a workflow that did start after all, finds it ended or
    running on and leaves it be."""

    def end(conn: sa.Connection) -> None:
        run = get_run(conn, run_id)
        if run is not None and run["status"] in RUN_LIVE:
            end_run(conn, run_id, "failed", error_code="start_failed", error=failed)

    entry_transaction(engine, store_retry_window, "releasing a run that did not start", end, lambda conn: None)
