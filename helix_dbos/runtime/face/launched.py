"""A launched runtime: the parts its mode composes over one configuration, frozen once launched.

Every mode holds the store (the API engine, the connections it holds, the resolved settings); a
mode that enqueues holds an ``Enqueuer``, one that runs runs a ``Runner`` (``shape.py`` says which
mode composes what). ``launch.py`` builds it; ``close`` takes it down in the one order that keeps
runs recoverable.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ...errors import ConfigurationError
from ...ledger.records import RunRow
from ...settings import EnvSettings
from ..floor.registry import Registry
from ..process.config import Settings
from ..process.pools import Footprint
from . import executor_leases
from .config import RuntimeConfig
from .enqueuer import Enqueuer
from .runner import Runner
from .shape import Shape


@dataclass(frozen=True)
class Launched:
    config: RuntimeConfig
    #: The ``HELIX_DBOS_*`` variables as the launch read them (``helix_dbos/settings.py``).
    environment: EnvSettings
    shape: Shape
    #: The database URL, executor id ("" in a front end), application version... as the launch resolved them.
    settings: Settings
    #: The API engine: entries, answers, reads (and a ``DBOSClient``'s system database).
    engine: sa.Engine
    #: The connections this launch holds at most on Postgres (process/pools.py).
    footprint: Footprint
    enqueuer: Enqueuer | None
    runner: Runner | None

    @property
    def own_executor_id(self) -> str | None:
        """This process's executor id; None in a front end, which runs nothing."""
        return self.runner.executor_id if self.runner is not None else None

    def enqueues(self, agent_name: str) -> bool:
        """Whether an entry into ``agent_name`` enqueues its run rather than starting it here."""
        return self.enqueuer is not None and self.enqueuer.enqueues(agent_name)

    def registry(self) -> Registry:
        """The registry a run started here is started against (a front end starts none: it enqueues)."""
        if self.runner is None:
            raise ConfigurationError("a front end (mode='client') runs nothing: its entries enqueue their runs")
        return self.runner.registry

    def front_end_client(self) -> Any:
        """The ``DBOSClient`` a front end reads the system database through (None where DBOS runs here)."""
        return self.enqueuer.client if self.runner is None and self.enqueuer is not None else None

    def run_is_dead(self, run: RunRow, conn: sa.Connection) -> str | None:
        """Why a ``running`` run's workflow can no longer finish (``executor_leases.run_is_dead``)."""
        return executor_leases.run_is_dead(run, conn, database_url=self.settings.database_url, own_executor_id=self.own_executor_id,
                                           probe_lease=self.environment.takeover_after)

    def close(self, wait_seconds: float, hurry: threading.Event, loop_stop: float | None = None) -> None:
        """Take every part down: the client, then the runner's runs (``wait_seconds`` of grace),
        its lease (through the API engine, still open), the engines, and the lock last."""
        if self.enqueuer is not None:
            self.enqueuer.close()  # its engine is ours (disposed below)
        taken_over = False
        if self.runner is not None:
            self.runner.stop(wait_seconds, hurry, loop_stop)
            taken_over = self.runner.release_lease(self.engine)
        self.engine.dispose()
        if self.runner is not None:
            self.runner.let_go(taken_over)
