"""Executor leases and takeovers: workers come and go, and nobody has to recover their runs by hand.

DBOS recovers a PENDING workflow only in a process launched with its executor id. Where every deploy
or reschedule brings new host names, a replaced worker's id never comes back, so its runs would wait
for an operator. Here every launched runtime registers its id in ``helix.executors`` and renews a
lease there while its executor lock holds (the lock's watchdog calls ``renew``); the lease and the
lock are one truth: a renewal that fails (the row says the runs were taken over, or a newer process
owns the id) ends the process like a lost lock, and a process cut off from the database stops
starting bodies as soon as its watchdog cannot confirm the lock, well before its lease lapses.

Every live runtime also watches the table (``Takeover``). An executor counts as gone when its lease
lapsed (``HELIX_DBOS_TAKEOVER_AFTER`` seconds without renewal) or when it shut down with workflows
still pending and its lock is free. The first live runtime to claim it, with one compare-and-set on
its row (``taken_over_by IS NULL`` at its generation) plus the history row's primary key, hands its
pending workflows to DBOS's recovery, which re-enqueues them for any live worker: the recovery
rules then decide each call as after any crash. A gone process that comes back finds its row taken
(it exits if it was only frozen) or its pending workflows gone (it runs nothing again).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import cast

import sqlalchemy as sa

from ...ledger import executors
from ...ledger.executors import candidates, claim, record_taken
from ...settings import DEFAULT_RENEW_INTERVAL
from ...views import ExecutorRecord
from .dbos_private import pending_workflow_count

log = logging.getLogger("helix_dbos")

def renew_interval(lease: float, configured: float | None = None) -> float:
    """Seconds between two lease renewals: ``HELIX_DBOS_LEASE_RENEW`` (``configured``) within
    0.1 s and half the lease, else ``settings.DEFAULT_RENEW_INTERVAL`` at most a third of it."""
    if configured is not None:
        return max(0.1, min(configured, lease / 2))
    return min(DEFAULT_RENEW_INTERVAL, lease / 3)


class Takeover:
    """The watcher thread of a live runtime: claims gone executors and recovers their pending runs.

    ``probe_free(executor_id)`` says whether nobody holds that id's executor lock (a released
    executor may be relaunching right now); ``has_pending`` whether DBOS holds pending workflows of
    it; ``recover(executor_id)`` hands those to DBOS's recovery and returns their ids.
    """

    def __init__(
        self,
        engine: sa.Engine,
        me: str,
        *,
        poll: float,
        probe_free: Callable[[str], bool],
        has_pending: Callable[[str], bool],
        recover: Callable[[str], list[str]],
    ) -> None:
        self.engine, self.me, self.poll = engine, me, poll
        self.probe_free, self.has_pending, self.recover = probe_free, has_pending, recover
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.taken: list[tuple[str, list[str]]] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"helix-takeover-{self.me}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.once()
            except Exception:  # a database blip: the next round tries again
                log.warning("executor takeover round failed; trying again in %.1fs", self.poll, exc_info=True)

    def once(self) -> list[tuple[str, list[str]]]:
        """One round: claim each gone executor this runtime can, and recover its pending runs."""
        done: list[tuple[str, list[str]]] = []
        with self.engine.connect() as conn:
            found = candidates(conn, self.me)
        for c in found:
            if self._stop.is_set():
                break
            if not self.has_pending(c["executor_id"]):
                continue  # nothing to take over (a clean shutdown, or a worker that finished its runs)
            if c["why"] == "released" and not self.probe_free(c["executor_id"]):
                continue  # it is relaunching under its own id: it recovers its own runs
            with self.engine.begin() as conn:
                if not claim(conn, c["executor_id"], int(c["generation"]), self.me, c["why"]):
                    continue  # another live runtime claimed it first, or it renewed after all
            ids = self.recover(c["executor_id"])
            with self.engine.begin() as conn:
                record_taken(conn, c["executor_id"], int(c["generation"]), ids)
            if ids:
                log.warning("executor %s took over %d pending workflow(s) of %s executor %s", self.me, len(ids), c["why"], c["executor_id"])
            done.append((c["executor_id"], ids))
        self.taken.extend(done)
        return done


def list_executors(conn: sa.Connection) -> list[ExecutorRecord]:
    """The operator's view: every executor with its lease status (the ``executor_audit`` view), the
    workflows DBOS still holds pending for it, and whose runs it took over."""
    rows = cast(list[ExecutorRecord], executors.audit(conn))  # the view's columns are the record's
    took = executors.took_over(conn)
    for r in rows:
        r["pending_runs"] = pending_workflow_count(conn, r["executor_id"])
        r["took_over"] = took.get(r["executor_id"], [])
    return rows
