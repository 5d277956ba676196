"""How a launched ``Runtime`` lets go: the shutdown's grace period, the worker's drain (SIGTERM),
the lease's release, and what a Ctrl-C during either does (``process/interrupts.py``).
"""

from __future__ import annotations

import logging
import threading

from ...ledger import executors
from ..floor import registry as process_registry
from ..flow import transactional
from ..process import dbos_private, interrupts, trace_export
from .launched import LaunchedParts

log = logging.getLogger("helix_dbos")

#: Seconds a drain gives DBOS's event loop to stop once the drain's wait is over: its tasks are
#: cancelled and unwind in milliseconds unless a body blocks the loop, which no wait would end.
DRAIN_LOOP_STOP = 1.0


class Stopping(LaunchedParts):
    """The ``Runtime``'s stopping half: ``shutdown`` and ``drain``."""

    def shutdown(self, wait_seconds: int = 2) -> None:
        """Stop this process's runtime; in-flight runs get ``wait_seconds`` to reach DBOS's own end.

        A run whose ledger is at rest finishes its workflow a moment later; waiting briefly keeps a
        short-lived process (a script, a CLI command) from leaving it pending for the next launch.
        Anything still running is recovered by this executor id's next launch: DBOS cancels it, and
        the run workflow turns the cancellation into ``ProcessStopping`` so it stays ``PENDING``
        rather than ``ERROR`` (see ``durable.ProcessStopping``). A Ctrl-C during the shutdown
        ends the grace period at once and is raised when the shutdown is done
        (``process/interrupts.py``); any number of them leaves the runs recoverable.
        """
        hurry = threading.Event()
        with interrupts.hurried_by_ctrl_c(hurry):
            self._shutdown(wait_seconds, hurry)

    def _stop_writing(self) -> None:
        """The grace period is over: a workflow's next ledger operation leaves it ``PENDING``."""
        if self._registry is not None:
            self._registry.stopping = True
            transactional.abandon_open()  # SQLite: a stuck body's write lock would hold DBOS's destroy

    def _shutdown(self, wait_seconds: float, hurry: threading.Event, loop_stop: float | None = None) -> None:
        if self._client is not None:
            self._client.destroy()  # its engine is ours (disposed below)
            self._client = None
        if self._takeover is not None:
            self._takeover.stop()
            self._takeover = None
        if self._polling is not None:
            self._polling.stop()
            self._polling = None
        if self._let_go_of_anyio_root is not None:
            self._let_go_of_anyio_root()
            self._let_go_of_anyio_root = None
        if self._owns_dbos:
            dbos_private.destroy(wait_seconds, hurry=hurry, before=self._stop_writing, loop_stop=loop_stop)
            self._owns_dbos = False
        trace_export.uninstall()  # after DBOS's stop: the spans its cancelled workflows ended go too
        if self._registry is not None:
            process_registry.uninstall(self._registry)  # only this runtime's own: another's stays live
            self._registry = None
        if self._lock is not None:
            self._lock.stop_watching()  # its renewals need the engine disposed below; the release decides
        taken_over = False
        if self._engine is not None and self._lease_generation is not None and self.settings is not None:
            try:
                with self._engine.begin() as conn:
                    taken_over = not executors.release(conn, self.settings.executor_id, self._lease_generation)
            except Exception:  # the database is gone: the lease lapses instead
                log.warning("could not release executor %s's lease", self.settings.executor_id, exc_info=True)
            self._lease_generation = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        if self._tx_engine is not None:
            self._tx_engine.dispose()
            self._tx_engine = None
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()
            if taken_over:
                lock.on_lost(f"executor {lock.executor_id!r} lost its lease (its runs were taken over by another executor)")

    def drain(self, timeout: float = 30.0, *, hurry: threading.Event | None = None) -> list[str]:
        """Stop dequeuing, let the runs in flight here finish for up to ``timeout`` seconds, shut down.

        What SIGTERM does to ``helix-dbos worker``. Runs never dequeued stay on their queue for the
        other workers; a run still in flight at the deadline stays ``PENDING`` under this executor
        and is taken over by another worker once this one's lease is released (at shutdown), where
        the recovery rules decide its calls. Returns the ids of the runs left in flight.
        ``hurry`` (set: the operator's second signal) ends the wait at once, as the deadline would.
        """
        left: list[str] = []
        if self._owns_dbos:
            left = dbos_private.wait_active(timeout, hurry)
        # The drain's deadline is the operator's: DBOS's event loop gets DRAIN_LOOP_STOP seconds to
        # stop, not its own 10 s, which a body blocking the loop used to add to every drain.
        hurried = threading.Event()
        with interrupts.hurried_by_ctrl_c(hurried):
            self._shutdown(0, hurried, loop_stop=DRAIN_LOOP_STOP)
        return left
