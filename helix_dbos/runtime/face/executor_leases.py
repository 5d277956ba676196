"""This executor's lease and the takeover of gone executors' runs: registering the lease (renewed
by the lock's watchdog), probing another executor's lock, handing a dead executor's pending runs to
DBOS's recovery (docs/operations.md), and the runs a launch settles before it serves anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import sqlalchemy as sa

from ...definitions import Agent
from ...errors import ExecutorIdInUseError
from ...ledger import executors, runs
from ...ledger.records import RunRow
from ...ledger.rows import now
from ...recovery import Profile
from ..floor import commits
from ..process import dbos_private, leases
from ..process.executor_lock import ExecutorLock

#: A gate-admitted run whose workflow does not exist after this long is taken to have never started.
ORPHAN_AFTER = timedelta(seconds=30)


def register_lease(engine: sa.Engine, lock: ExecutorLock, executor_id: str, lease_renew: float | None) -> int:
    """Register this executor's lease (its generation), renewed by the lock's watchdog from now on."""
    lease = lock.lease
    with engine.begin() as conn:
        generation = executors.register(conn, executor_id, lease)

    def renew() -> bool | None:
        with engine.begin() as conn:
            return executors.renew(conn, executor_id, generation)

    lock.set_renewer(renew, leases.renew_interval(lease, lease_renew))
    return generation


def release_lease(engine: sa.Engine, executor_id: str, generation: int) -> bool:
    """Release the lease; False when another executor took it over meanwhile (its runs are gone)."""
    with engine.begin() as conn:
        return executors.release(conn, executor_id, generation)


def watch_for_gone_executors(engine: sa.Engine, database_url: str, executor_id: str, lease: float, probe_lease: float) -> leases.Takeover:
    """Started: the watcher that takes over the pending runs of executors whose lease lapsed."""
    takeover = leases.Takeover(
        engine,
        executor_id,
        poll=max(0.25, min(5.0, lease / 4)),
        probe_free=lambda other: executor_free(database_url, other, probe_lease),
        has_pending=lambda other: _has_pending(engine, other),
        recover=recover_workflows,
    )
    takeover.start()
    return takeover


def executor_free(database_url: str, executor_id: str, probe_lease: float) -> bool:
    """Whether no live process holds ``executor_id`` (a probe's ``lease`` is ``HELIX_DBOS_TAKEOVER_AFTER``'s)."""
    probe = ExecutorLock(database_url, probe_lease)
    try:
        probe.acquire(executor_id, wait=False)
        return True
    except ExecutorIdInUseError:
        return False
    finally:
        probe.release()


def _has_pending(engine: sa.Engine, executor_id: str) -> bool:
    with engine.connect() as conn:
        return dbos_private.pending_workflow_count(conn, executor_id) > 0


def recover_workflows(executor_id: str) -> list[str]:
    """Hand a gone executor's pending runs to DBOS's recovery, which re-enqueues them on its
    internal queue: they start at that queue's next poll, within ``HELIX_DBOS_RECOVERY_POLL``.
    (Polling fast from here would not help: DBOS's queue thread is asleep for its current
    interval, and a shorter one only decays in by 10% a poll.)"""
    return dbos_private.recover_pending_workflows(executor_id)


def settle_cancelled_runs(engine: sa.Engine, executor_id: str, agents: Mapping[str, Agent], profile: Profile) -> None:
    """Runs of this executor that an operator cancelled with DBOS's tools while no process of
    ours was alive to notice: DBOS will never run them again, so settle them as an abort now
    (the wake's counterpart of the live run settling its own cancel)."""
    with engine.begin() as conn:
        for run_id in runs.running_of_executor(conn, executor_id):
            if dbos_private.workflow_status(conn, run_id) == "CANCELLED":
                commits.settle_cancel(conn, run_id, agents, profile)
        # A run cancelled while it waited on an entry queue is never dequeued: no executor owns it,
        # so every launch settles those it finds (its session would stay queued for ever).
        for run_id in dbos_private.cancelled_among(conn, runs.queued(conn)):
            commits.settle_cancel(conn, run_id, agents, profile)


def run_is_dead(run: RunRow, conn: sa.Connection, *, database_url: str, own_executor_id: str | None, probe_lease: float) -> str | None:
    """Why a ``running`` run's workflow can no longer finish (so an entry may take over), or None.
    ``own_executor_id``: this process's (None in a front end, which runs nothing)."""
    row = dbos_private.workflow_row(conn, run["run_id"])
    if row is None:
        created = run["created_at"] if run["created_at"].tzinfo else run["created_at"].replace(tzinfo=now().tzinfo)
        return "lost" if now() - created > ORPHAN_AFTER else None
    status, owner = row
    if status == "CANCELLED":
        return "cancelled"
    if status in ("ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED", "SUCCESS"):
        return "lost"
    if status != "PENDING" or not owner or owner == own_executor_id:
        return None
    probe = ExecutorLock(database_url, probe_lease)
    try:
        probe.acquire(owner, wait=False)
    except ExecutorIdInUseError:
        return None  # its executor is alive (or may be, until its lease lapses) and will finish it
    finally:
        probe.release()
    # its executor is gone: make sure a restart never resumes it (in this transaction: see cancel_unfinished)
    dbos_private.cancel_unfinished(conn, run["run_id"])
    return "lost"


def recover_executor(engine: sa.Engine, database_url: str, own_executor_id: str, executor_id: str, probe_lease: float) -> list[str]:
    """Take over a dead executor's pending runs (its process must be gone: ids are never shared)."""
    probe = ExecutorLock(database_url, probe_lease)
    try:
        probe.acquire(executor_id)  # refused while its holder lives; waits out a cut-off holder's lease
        # Held while the runs are handed over, so that executor cannot relaunch and recover them too.
        with engine.begin() as conn:
            generation = executors.generation_of(conn, executor_id)
            claimed = generation is not None and executors.claim(conn, executor_id, generation, own_executor_id, "operator")
        recovered = recover_workflows(executor_id)
        if claimed:
            assert generation is not None
            with engine.begin() as conn:
                executors.record_taken(conn, executor_id, generation, recovered)
    finally:
        probe.release()
    return recovered
