"""The process's shape (``Runtime(mode=...)``, docs/scaling.md): a front end that only admits and
enqueues, a worker that serves the entry queues, or one process that runs its own entries; which
queues each serves and how an entry enqueues its run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from ...ledger.engine import ensure_sqlite_wal, is_sqlite
from ...ledger.migrate import upgrade
from ...ledger.names import ENTRY_QUEUE, RUN_WORKFLOW
from ...settings import EnvSettings
from ..floor.records import OpenedRun
from ..process import dbos_private, fleet_limits, pools, queues
from ..process.config import Settings, resolve_app_version, resolve_database_url
from .launched import LaunchedParts, Mode

if TYPE_CHECKING:
    from dbos import EnqueueOptions


class Modes(LaunchedParts):
    """The ``Runtime``'s mode-dependent half: client launch, queue choice, enqueueing."""

    def _resolve_mode(self, environment: EnvSettings) -> Mode:
        """``Runtime(mode=)``, else ``HELIX_DBOS_MODE`` (checked by ``EnvSettings``), else ``process``."""
        return self.mode or environment.mode

    def _queue_settings(self, url: str) -> queues.QueueSettings:
        return queues.QueueSettings(self.worker_concurrency, self.owner_share, 0.05 if is_sqlite(url) else 0.1)

    def _launch_client(self, environment: EnvSettings) -> None:
        """A front end: the ledger and DBOS's tables migrated, the entry queues registered, an engine
        and a ``DBOSClient`` over it. DBOS itself is never configured nor launched here, so this
        process has no queue thread, no recovery and no executor: it cannot run anything."""
        from dbos import DBOSClient, DBOSPortableJSONSerializer

        url = resolve_database_url(self.database_url, environment=environment)
        if is_sqlite(url):
            ensure_sqlite_wal(url)
        upgrade(url)
        self._agree_on_limits(url, environment)  # before the queues are registered or anything enqueued
        api = pools.api_pool("client", pools.check_pool("api_pool", self.api_pool), environment)
        self._footprint = pools.NO_CONNECTIONS if is_sqlite(url) else pools.Footprint("client", api, None, None, 0, 0)
        self._engine = self._create_api_engine(url, environment, api)
        self._client = DBOSClient(system_database_engine=self._engine, application_name=self._app_name, serializer=DBOSPortableJSONSerializer())
        dbos_private.run_client_migrations(self._client)
        queues.register_entry_queues(self._client.register_queue, self.agents, self.limits, self._queue_settings(url))
        # No executor id: nothing runs here (``executor_id`` refuses); the version is what it enqueues under.
        self.settings = Settings(url, "", resolve_app_version(self._app_version, environment), self._app_name, store_retry_window=self.store_retry_window, log_level=environment.log_level)

    def _agree_on_limits(self, url: str, environment: EnvSettings) -> None:
        """Every agent's limits as the fleet recorded them for this application version, or
        ``LimitsMismatchError`` (``process/fleet_limits.py``): a front end and workers that disagree
        on an agent's queue would leave its runs queued for ever, or bypass its ``max_running``."""
        fleet_limits.check(url, resolve_app_version(self._app_version, environment), self.agents, self.limits,
                           mode=self._mode, replace=environment.replace_limits)

    def _enqueues(self, agent_name: str) -> bool:
        """Whether an entry into ``agent_name`` enqueues its run rather than starting it here."""
        return self._mode != "process" or queues.limited(agent_name, self.limits)

    def _listened_queues(self) -> list[str] | None:
        """The queues DBOS serves here (None: every queue of the app). A worker serves every entry
        queue, and the children's queue if ``serve_queue``; a single process its own entry queues
        (an agent with a limit) and, if ``serve_queue``, the children's queue; nothing else it would
        otherwise poll for nothing: an idle poll of a queue costs each worker 10 claims a second
        (~6 ms of worker CPU per run at 1,000 sessions on 2 workers, docs/benchmarks.md)."""
        entry = sorted({queues.entry_queue(name, self.limits) for name in self.limits if queues.limited(name, self.limits)})
        if self._mode == "worker":
            return None if self.serve_queue else [ENTRY_QUEUE, *entry]
        if self.serve_queue:
            return None if not entry else [self.queue_name, *entry]
        return entry

    def _enqueue(self, conn: sa.Connection, opened: OpenedRun, priority: int | None) -> None:
        options: EnqueueOptions = {
            "queue_name": queues.entry_queue(opened.agent_name, self.limits),
            "workflow_name": RUN_WORKFLOW,
            "workflow_id": opened.run_id,
            "app_version": self.launched_settings.app_version,
            "queue_partition_key": queues.partition_key(opened.owner),
        }
        if priority is not None:
            options["priority"] = priority
        self._client.enqueue_in_transaction(conn, options, opened.run_id)
