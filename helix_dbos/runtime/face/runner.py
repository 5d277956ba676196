"""The part of a launched runtime that runs runs: DBOS launched here (or the app's, joined), this
process's executor lock and lease, the workflows' transaction engine and the registry the run
workflows are bound to. A front end has none (``shape.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from ..floor import registry as process_registry
from ..floor.registry import Registry
from ..flow import transactional
from ..process import dbos_private, leases, polling, trace_export
from ..process.executor_lock import ExecutorLock
from . import executor_leases

log = logging.getLogger("helix_dbos")


@dataclass(frozen=True)
class Runner:
    executor_id: str
    lock: ExecutorLock
    #: The workflows' ledger transactions' own pool (so API callers and workflows never starve each other).
    tx_engine: sa.Engine
    #: What this launch hands down to the workflows it runs; installed as the process's one.
    registry: Registry
    #: DBOS was configured and launched here (False: the app's own DBOS, joined).
    owns_dbos: bool
    polling: polling.InternalQueuePolling | None
    let_go_of_anyio_root: Callable[[], None]  # process/anyio_root.py
    lease_generation: int
    #: Watches for gone executors and takes over their pending runs (None: ``takeover=False``).
    takeover: leases.Takeover | None

    def stop(self, wait_seconds: float, hurry: threading.Event, loop_stop: float | None) -> None:
        """Stop running: no more takeovers or polls, DBOS's grace period, the registry withdrawn."""
        if self.takeover is not None:
            self.takeover.stop()
        if self.polling is not None:
            self.polling.stop()
        self.let_go_of_anyio_root()
        if self.owns_dbos:
            dbos_private.destroy(wait_seconds, hurry=hurry, before=self._stop_writing, loop_stop=loop_stop)
        trace_export.uninstall()  # after DBOS's stop: the spans its cancelled workflows ended go too
        process_registry.uninstall(self.registry)  # only this runtime's own: another's stays live
        self.lock.stop_watching()  # its renewals need the API engine, disposed next; the release decides

    def _stop_writing(self) -> None:
        """The grace period is over: a workflow's next ledger operation leaves it ``PENDING``."""
        self.registry.stopping = True
        transactional.abandon_open()  # SQLite: a stuck body's write lock would hold DBOS's destroy

    def release_lease(self, engine: sa.Engine) -> bool:
        """Release the lease through the API engine; True when it had been taken over meanwhile."""
        try:
            return not executor_leases.release_lease(engine, self.executor_id, self.lease_generation)
        except Exception:  # the database is gone: the lease lapses instead
            log.warning("could not release executor %s's lease", self.executor_id, exc_info=True)
            return False

    def let_go(self, taken_over: bool) -> None:
        """The last of it: the transaction engine and the executor lock."""
        self.tx_engine.dispose()
        self.lock.release()
        if taken_over:
            self.lock.on_lost(f"executor {self.lock.executor_id!r} lost its lease (its runs were taken over by another executor)")
