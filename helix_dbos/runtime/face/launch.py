"""``Runtime.launch``'s work: the parts a mode composes (``shape.py``), built in the order that
keeps runs recoverable, over the configuration and the environment the launch read.

Both compositions migrate the ledger and agree on the fleet's limits before anything is
registered, served or enqueued. A part that fails releases what the launch took so far, newest
first (``ExitStack``), so the process can launch again; the launched runtime's own ``close``
takes everything down in the order ``launched.py`` gives.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import sqlalchemy as sa
from dbos import DBOS

from ...ledger.engine import create_sync_engine, ensure_sqlite_wal, is_sqlite
from ...ledger.migrate import upgrade
from ...settings import EnvSettings
from ..floor import registry as process_registry
from ..floor.registry import Registry
from ..flow import transactional, workflow
from ..process import anyio_root, dbos_private, fleet_limits, polling, pools, queues, trace_export
from ..process.config import Settings, requested_executor_id, resolve_app_version, resolve_database_url
from ..process.executor_lock import ExecutorLock
from ..process.pools import POOLER_CONNECT_ARGS, Footprint, Pool
from . import executor_leases
from .config import RuntimeConfig
from .enqueuer import Enqueuer, dbos_client
from .launched import Launched
from .runner import Runner
from .shape import Shape, has_enqueuer, listened_queues, shape_of


def launch(config: RuntimeConfig, environment: EnvSettings) -> Launched:
    """The launched runtime this mode composes: a front end, or a process that runs runs."""
    shape = shape_of(config, environment.mode)
    compose = launch_runner if shape.runs else launch_front_end
    return compose(config, environment, shape)


def _prepare_store(config: RuntimeConfig, environment: EnvSettings, shape: Shape, url: str) -> str:
    """The ledger and DBOS's tables migrated, the fleet's limits agreed; the application version."""
    if is_sqlite(url):
        ensure_sqlite_wal(url)
    upgrade(url)
    app_version = resolve_app_version(config.application_version, environment)
    # LimitsMismatchError (process/fleet_limits.py): a front end and workers that disagree on an
    # agent's queue would leave its runs queued for ever, or bypass its max_running
    fleet_limits.check(url, app_version, config.agents, config.limits, mode=shape.mode, replace=environment.replace_limits)
    return app_version


def _queue_settings(config: RuntimeConfig, url: str) -> queues.QueueSettings:
    return queues.QueueSettings(config.worker_concurrency, config.owner_share, 0.05 if is_sqlite(url) else 0.1)


def launch_front_end(config: RuntimeConfig, environment: EnvSettings, shape: Shape) -> Launched:
    """A front end: the store and an ``Enqueuer``. DBOS itself is never configured nor launched
    here, so this process has no queue thread, no recovery and no executor: it cannot run anything."""
    url = resolve_database_url(config.database_url, environment)
    app_version = _prepare_store(config, environment, shape, url)
    api = pools.api_pool(shape.mode, pools.check_pool("api_pool", config.api_pool), environment)
    footprint = pools.NO_CONNECTIONS if is_sqlite(url) else pools.Footprint(shape.mode, api, None, None, 0, 0)
    with ExitStack() as undo:
        engine = _pooled_engine(config, environment, url, api, pools.application_name(shape.mode, "api"))
        undo.callback(engine.dispose)
        enqueuer = Enqueuer(dbos_client(engine, config.app_name), config.limits, app_version, every_entry=shape.enqueues_every_entry)
        undo.callback(enqueuer.close)
        dbos_private.run_client_migrations(enqueuer.client)
        queues.register_entry_queues(enqueuer.client.register_queue, config.agents, config.limits, _queue_settings(config, url))
        # No executor id: nothing runs here (``Runtime.executor_id`` refuses); the version is what it enqueues under.
        settings = Settings(url, "", app_version, config.app_name, store_retry_window=config.store_retry_window, log_level=environment.log_level)
        launched = Launched(config, environment, shape, settings, engine, footprint, enqueuer, None)
        undo.pop_all()
    return launched


def launch_runner(config: RuntimeConfig, environment: EnvSettings, shape: Shape) -> Launched:
    """A process that runs runs (one ``process``, or a ``worker``): its executor lock, DBOS, the
    engines, the registry its workflows are bound to, then its lease; an ``Enqueuer`` if any entry
    of it enqueues."""
    existing = dbos_private.configured_dbos()
    url = resolve_database_url(config.database_url, environment)
    if existing is not None and config.database_url is None:
        url = dbos_private.dbos_config(existing).get("system_database_url") or url
    with ExitStack() as undo:
        traces = list(environment.otlp_traces_endpoints)
        if traces:  # before DBOS launches: its recovery starts workflows at once
            trace_export.install(traces, config.app_name)
            undo.callback(trace_export.uninstall)
        app_version = _prepare_store(config, environment, shape, url)
        lock = ExecutorLock(url, lease=config.takeover_after if config.takeover_after is not None else environment.takeover_after)
        undo.callback(lock.release)
        executor_id = lock.acquire(requested_executor_id(config.executor_id, environment))
        lock.watch()  # a lost lock is re-acquired before any more bodies run, or the process exits
        undo.callback(lock.stop_watching)
        settings = Settings(url, executor_id, app_version, config.app_name, store_retry_window=config.store_retry_window, log_level=environment.log_level)
        footprint = _plan_connections(config, environment, shape, url, existing)
        internal_polling = None
        if existing is None:
            DBOS(config=settings.dbos_config(footprint.dbos, pools.application_name(shape.mode, "dbos", executor_id)))
            undo.callback(dbos_private.destroy, 0, before=_abandon_open)
            internal_polling = polling.InternalQueuePolling(environment.recovery_poll)
            undo.callback(internal_polling.stop)
            listen = listened_queues(shape, config)
            if listen is not None:
                DBOS.listen_queues(listen)  # DBOS's own internal queues (recovery) are always served
        engine = _pooled_engine(config, environment, url, footprint.api, pools.application_name(shape.mode, "api", executor_id))
        undo.callback(engine.dispose)
        tx = footprint.tx or pools.Pool(pools.DEFAULT_TX_POOL)  # SQLite: no server, no pool sizes (_pool_args)
        tx_engine = _pooled_engine(config, environment, url, tx, pools.application_name(shape.mode, "tx", executor_id))
        undo.callback(tx_engine.dispose)
        registry = _registry(config, environment, settings, engine, tx_engine, lock)
        workflow.register(registry)  # the run and companion workflows, bound to this registry
        process_registry.install(registry)  # before DBOS.launch: recovery starts workflows at once
        undo.callback(process_registry.uninstall, registry)
        if internal_polling is not None:  # before DBOS.launch, whose recovery fills the internal queue
            with engine.connect() as conn:
                backlog = dbos_private.internal_queue_backlog(conn, executor_id)
            internal_polling.fast() if backlog else internal_polling.settle()
        if not dbos_private.dbos_launched():
            DBOS.launch()
        let_go_of_anyio_root = anyio_root.hold_root(dbos_private.background_workflow_loop())
        undo.callback(let_go_of_anyio_root)
        DBOS.register_queue(config.queue_name, polling_interval_sec=0.05 if is_sqlite(url) else 0.1)
        enqueuer = None
        if has_enqueuer(shape, config):
            queues.register_entry_queues(DBOS.register_queue, config.agents, config.limits, _queue_settings(config, url))
            enqueuer = Enqueuer(dbos_client(engine, config.app_name), config.limits, app_version, every_entry=shape.enqueues_every_entry)
            undo.callback(enqueuer.close)
        executor_leases.settle_cancelled_runs(engine, executor_id, config.agents, config.recovery)
        generation = executor_leases.register_lease(engine, lock, executor_id, environment.lease_renew)
        takeover = executor_leases.watch_for_gone_executors(engine, url, executor_id, lock.lease, environment.takeover_after) if config.takeover else None
        runner = Runner(executor_id, lock, tx_engine, registry, existing is None, internal_polling, let_go_of_anyio_root, generation, takeover)
        launched = Launched(config, environment, shape, settings, engine, footprint, enqueuer, runner)
        undo.pop_all()
    return launched


def _registry(config: RuntimeConfig, environment: EnvSettings, settings: Settings, engine: sa.Engine, tx_engine: sa.Engine,
              lock: ExecutorLock) -> Registry:
    """What this launch hands down to the workflows it runs (their ``Env``, its lock)."""
    env = process_registry.Env(
        agents=config.agents,
        profile=config.recovery,
        settings=settings,
        tx_engine=tx_engine,
        engine=engine,
        queue_name=config.queue_name,
        live_output=config.live_output,
        environment=environment,
        limits=config.limits,
    )
    return Registry(env, lock)


def _plan_connections(config: RuntimeConfig, environment: EnvSettings, shape: Shape, url: str, existing: Any) -> Footprint:
    """The pools this launch opens (process/pools.py): DBOS's as the app configured it when it
    did, else sized here; the listener where DBOS listens (Postgres with LISTEN/NOTIFY)."""
    api = pools.api_pool(shape.mode, pools.check_pool("api_pool", config.api_pool), environment)
    tx = pools.tx_pool(pools.check_pool("tx_pool", config.tx_pool), environment, config.worker_concurrency)
    dbos = pools.dbos_pool(pools.check_pool("dbos_pool", config.dbos_pool), environment)
    listens = True
    if existing is not None:
        dbos_config = dbos_private.dbos_config(existing)  # processed: the engine's kwargs as DBOS made them
        kwargs = (dbos_config.get("database") or {}).get("sys_db_engine_kwargs") or {}
        dbos = pools.Pool(int(kwargs.get("pool_size") or 20), int(kwargs.get("max_overflow") or 0))
        listens = dbos_config.get("use_listen_notify") is not False
    if is_sqlite(url):
        return pools.NO_CONNECTIONS
    return Footprint(shape.mode, api, tx, dbos, 1 if listens else 0, 1)


def _pooled_engine(config: RuntimeConfig, environment: EnvSettings, url: str, pool: Pool, name: str) -> sa.Engine:
    """An engine of helix's own pools: through the pooler when one is set (pools.pooler_url)."""
    pooled = pools.pooler_url(config.pooler_url, environment, url)
    if pooled is not None:  # Postgres only (pools.pooler_url)
        return create_sync_engine(pooled, application_name=name, connect_args=dict(POOLER_CONNECT_ARGS), pool_size=pool.size, max_overflow=pool.overflow)
    if is_sqlite(url):
        return create_sync_engine(url, application_name=name)
    return create_sync_engine(url, application_name=name, generic_plans=True, pool_size=pool.size, max_overflow=pool.overflow)


def _abandon_open() -> None:
    transactional.abandon_open()  # SQLite: a stuck body's write lock would hold DBOS's destroy
