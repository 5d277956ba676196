"""DBOS's start of a run an entry admitted, waited for no longer than the store is away."""

from __future__ import annotations

import threading
from concurrent import futures
from concurrent.futures import Future
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID

from ...ledger.engine import ping
from ..floor.registry import Registry
from ..floor.store_retry import retrying_sync


def start(registry: Registry, engine: sa.Engine, store_retry_window: float, run_id: str, session_id: str) -> Any:
    """``DBOS.start_workflow`` of an admitted run (its workflow handle).

    DBOS records the workflow with its own retry, which has no deadline (``db_retry``): a
    database that went away after the entry's commit would hold the caller for as long as the
    outage lasts. So the start runs in its own thread, and while it has not returned the store
    is asked (``ledger.engine.ping``, through ``retrying_sync``): a store that answers means DBOS is only
    slow (its pool, a loaded server), and the wait goes on; one that stays away past
    ``store_retry_window`` ends the wait with ``store_unavailable``. The run was admitted, so
    it is not lost: DBOS's retry still records and starts it once the database is back (while
    this process lives), and otherwise the session's next entry finds it never started and
    takes over (``entries.open_run``'s ``is_dead``).
    """
    if DBOS.workflow_id is not None:  # an entry from inside a workflow: DBOS records the start in its context, this thread's
        with SetWorkflowID(run_id):
            return DBOS.start_workflow(registry.run_workflow, run_id)
    started: Future[Any] = Future()

    def run() -> None:
        try:
            with SetWorkflowID(run_id):
                started.set_result(DBOS.start_workflow(registry.run_workflow, run_id))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            started.set_exception(exc)

    threading.Thread(target=run, name=f"helix-start-{run_id[:8]}", daemon=True).start()
    what = f"starting run {run_id!r} of session {session_id!r} (admitted: it starts once the database is back, or the session's next entry takes it over)"
    while not futures.wait([started], timeout=1.0).done:
        retrying_sync(what, lambda: ping(engine), store_retry_window)
    return started.result()
