"""What a launch fills in on a ``Runtime`` (engines, lock, DBOS client, registry, settings) and
the checked accessors that refuse before launch.

A base of the ``Runtime`` and of the halves split out of it (``modes.py``, ``executor_leases.py``,
``drain.py``), so each half names the state it touches without importing ``runtime.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from ...definitions import Agent
from ...definitions.limits import AgentLimits
from ...errors import ConfigurationError
from ...ledger.engine import create_sync_engine, is_sqlite
from ...recovery import Profile
from ...settings import MODES, EnvSettings, Mode
from ..floor.registry import Registry
from ..process import leases, polling
from ..process.config import Settings
from ..process.executor_lock import ExecutorLock
from ..process.pools import POOLER_CONNECT_ARGS, Footprint, Pool, PoolSetting, application_name, pooler_url

__all__ = ["MODES", "LaunchedParts", "Mode"]


class LaunchedParts:
    """The configuration a ``Runtime`` holds and the state its launch fills in (declared here,
    assigned by ``Runtime.__init__``)."""

    # configuration (fixed once launched: runtime.CONFIGURATION)
    agents: dict[str, Agent]
    api_pool: PoolSetting | None
    tx_pool: PoolSetting | None
    dbos_pool: PoolSetting | None
    pooler_url: str | None
    live_output: bool
    recovery: Profile
    database_url: str | None
    queue_name: str
    auto_continue: bool
    serve_queue: bool
    store_retry_window: float
    takeover_after: float | None
    takeover: bool
    mode: Mode | None
    limits: dict[str, AgentLimits]
    worker_concurrency: int | None
    owner_share: int | None
    _executor_id: str | None
    _app_version: str | None
    _app_name: str
    # what a launch fills in
    _environment: EnvSettings | None  # the HELIX_DBOS_* variables as the launch read them
    settings: Settings | None
    _engine: sa.Engine | None
    _tx_engine: sa.Engine | None
    _lock: ExecutorLock | None
    _owns_dbos: bool
    _takeover: leases.Takeover | None
    _polling: polling.InternalQueuePolling | None
    _let_go_of_anyio_root: Callable[[], None] | None  # process/anyio_root.py
    _lease_generation: int | None
    _registry: Registry | None
    _client: Any
    _mode: Mode
    _footprint: Footprint | None  # the connections this launch holds on Postgres (process/pools.py)

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            raise ConfigurationError("the runtime is not launched; call runtime.launch()")
        return self._engine

    @property
    def is_front_end(self) -> bool:
        """Launched as a front end (``mode="client"``): it admits and enqueues, and runs nothing."""
        return self._mode == "client" and self._engine is not None

    def _launched_registry(self) -> Registry:
        if self._registry is None:
            raise ConfigurationError("the runtime is not launched; call runtime.launch()")
        return self._registry

    @property
    def launched_settings(self) -> Settings:
        if self.settings is None:
            raise ConfigurationError("the runtime is not launched; call runtime.launch()")
        return self.settings

    @property
    def executor_id(self) -> str:
        if self.is_front_end:
            raise ConfigurationError("a front end (mode='client') has no executor: it runs nothing")
        if self.settings is None:
            raise ConfigurationError("the runtime is not launched, so it has no executor id yet; call runtime.launch()")
        return self.settings.executor_id

    def connection_footprint(self) -> dict[str, int]:
        """The Postgres connections this launched process holds at most, by pool, and their
        ``total`` (docs/operations.md, "Database connections"): what to size ``max_connections``
        by. A pool without overflow opens its connections once and keeps them. All 0 on SQLite."""
        if self._footprint is None:
            raise ConfigurationError("the runtime is not launched; call runtime.launch()")
        return self._footprint.as_dict()

    @staticmethod
    def _pool_args(url: str, pool: Pool) -> dict[str, int]:
        return {} if is_sqlite(url) else {"pool_size": pool.size, "max_overflow": pool.overflow}

    def _create_api_engine(self, url: str, environment: EnvSettings, pool: Pool, executor_id: str = "") -> sa.Engine:
        """The API engine (entries, answers, reads; a worker's or front end's ``DBOSClient``)."""
        return self._pooled_engine(url, environment, pool, application_name(self._mode, "api", executor_id))

    def _pooled_engine(self, url: str, environment: EnvSettings, pool: Pool, name: str) -> sa.Engine:
        """An engine of helix's own pools: through the pooler when one is set (pools.pooler_url)."""
        pooled = pooler_url(self.pooler_url, environment, url)
        if pooled is None:
            return create_sync_engine(url, application_name=name, **self._pool_args(url, pool))
        return create_sync_engine(pooled, application_name=name, connect_args=dict(POOLER_CONNECT_ARGS), **self._pool_args(pooled, pool))
