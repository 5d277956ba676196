"""This executor's lease and the takeover of gone executors' runs, as the ``Runtime`` drives them:
registering and renewing the lease, probing another executor's lock, handing a dead executor's
pending runs to DBOS's recovery (docs/operations.md).
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from ...errors import ExecutorIdInUseError
from ...ledger import executors, runs
from ...ledger.records import RunRow
from ...ledger.rows import now
from ..floor import commits
from ..process import dbos_private, leases
from ..process.executor_lock import ExecutorLock
from .launched import LaunchedParts

#: A gate-admitted run whose workflow does not exist after this long is taken to have never started.
ORPHAN_AFTER = timedelta(seconds=30)


class ExecutorLeases(LaunchedParts):
    """The ``Runtime``'s executor half: its own lease, and acting for executors that are gone."""

    def _start_lease(self, executor_id: str) -> None:
        """Register this executor's lease (renewed by the lock's watchdog) and start watching for
        gone executors whose pending runs this process should take over (docs/operations.md)."""
        assert self._lock is not None
        lease = self._lock.lease
        with self.engine.begin() as conn:
            generation = self._lease_generation = executors.register(conn, executor_id, lease)

        def renew() -> bool | None:
            with self.engine.begin() as conn:
                return executors.renew(conn, executor_id, generation)

        self._lock.set_renewer(renew, leases.renew_interval(lease, self._environment.lease_renew if self._environment else None))
        if self.takeover:
            self._takeover = leases.Takeover(
                self.engine,
                executor_id,
                poll=max(0.25, min(5.0, lease / 4)),
                probe_free=self._executor_free,
                has_pending=self._has_pending,
                recover=self._recover_workflows,
            )
            self._takeover.start()

    def _executor_free(self, executor_id: str) -> bool:
        probe = ExecutorLock(self.settings.database_url if self.settings else "")
        try:
            probe.acquire(executor_id, wait=False)
            return True
        except ExecutorIdInUseError:
            return False
        finally:
            probe.release()

    def _has_pending(self, executor_id: str) -> bool:
        with self.engine.connect() as conn:
            return dbos_private.pending_workflow_count(conn, executor_id) > 0

    def _recover_workflows(self, executor_id: str) -> list[str]:
        """Hand a gone executor's pending runs to DBOS's recovery, which re-enqueues them on its
        internal queue: they start at that queue's next poll, within ``HELIX_DBOS_RECOVERY_POLL``.
        (Polling fast from here would not help: DBOS's queue thread is asleep for its current
        interval, and a shorter one only decays in by 10% a poll.)"""
        return dbos_private.recover_pending_workflows(executor_id)

    def _settle_cancelled_runs(self) -> None:
        """Runs of this executor that an operator cancelled with DBOS's tools while no process of
        ours was alive to notice: DBOS will never run them again, so settle them as an abort now
        (the wake's counterpart of the live run settling its own cancel)."""
        with self.engine.begin() as conn:
            for run_id in runs.running_of_executor(conn, self.executor_id):
                if dbos_private.workflow_status(conn, run_id) == "CANCELLED":
                    commits.settle_cancel(conn, run_id, self.agents, self.recovery)
            # A run cancelled while it waited on an entry queue is never dequeued: no executor owns it,
            # so every launch settles those it finds (its session would stay queued for ever).
            for run_id in dbos_private.cancelled_among(conn, runs.queued(conn)):
                commits.settle_cancel(conn, run_id, self.agents, self.recovery)

    def _run_is_dead(self, run: RunRow, conn: sa.Connection) -> str | None:
        """Why a ``running`` run's workflow can no longer finish (so an entry may take over), or None."""
        row = dbos_private.workflow_row(conn, run["run_id"])
        if row is None:
            created = run["created_at"] if run["created_at"].tzinfo else run["created_at"].replace(tzinfo=now().tzinfo)
            return "lost" if now() - created > ORPHAN_AFTER else None
        status, owner = row
        if status == "CANCELLED":
            return "cancelled"
        if status in ("ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED", "SUCCESS"):
            return "lost"
        if status != "PENDING" or not owner or (self._mode != "client" and owner == self.executor_id):
            return None
        probe = ExecutorLock(self.settings.database_url if self.settings else "")
        try:
            probe.acquire(owner, wait=False)
        except ExecutorIdInUseError:
            return None  # its executor is alive (or may be, until its lease lapses) and will finish it
        finally:
            probe.release()
        # its executor is gone: make sure a restart never resumes it (in this transaction: see cancel_unfinished)
        dbos_private.cancel_unfinished(conn, run["run_id"])
        return "lost"

    def recover_executor(self, executor_id: str) -> list[str]:
        """Take over a dead executor's pending runs (its process must be gone: ids are never shared)."""
        probe = ExecutorLock(self.launched_settings.database_url)
        try:
            probe.acquire(executor_id)  # refused while its holder lives; waits out a cut-off holder's lease
            # Held while the runs are handed over, so that executor cannot relaunch and recover them too.
            with self.engine.begin() as conn:
                generation = executors.generation_of(conn, executor_id)
                claimed = generation is not None and executors.claim(conn, executor_id, generation, self.executor_id, "operator")
            recovered = self._recover_workflows(executor_id)
            if claimed:
                assert generation is not None
                with self.engine.begin() as conn:
                    executors.record_taken(conn, executor_id, generation, recovered)
        finally:
            probe.release()
        return recovered
