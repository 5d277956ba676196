"""The ``Runtime``: configure and launch DBOS, open runs through the gate, answer, stop, read.

Sync methods block the caller's thread; each has an ``_async`` twin that runs it in a worker
thread, so the blocking engine never runs on an event loop and workflows always run on DBOS's own.

The class is assembled from halves kept beside it: the process's shape (``modes.py``), its
executor lease and takeovers (``executor_leases.py``), its shutdown and drain (``drain.py``),
over the state a launch fills in (``launched.py``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

import sqlalchemy as sa
from dbos import DBOS

from ...definitions import Agent, home
from ...definitions.inputs import check_priority, check_session_id, check_text
from ...definitions.limits import AgentLimits
from ...errors import ConfigurationError, StoreUnavailableError, ValidationError
from ...ledger.engine import ensure_sqlite_wal, is_sqlite
from ...ledger.migrate import upgrade
from ...ledger.names import RUNS_QUEUE
from ...ledger.rows import new_id, now
from ...ledger.runs import end_run, get_run
from ...ledger.statuses import RUN_LIVE, EntryKind
from ...recovery import Profile
from ...settings import EnvSettings, from_environ
from ...views import RunResult, SessionView, StopReceipt
from ..floor import registry as process_registry
from ..floor.records import OpenedRun
from ..floor.registry import Registry
from ..floor.store_retry import launch_refusal, retrying_sync
from ..flow import workflow
from ..process import anyio_root, dbos_private, leases, polling, pools, queues, trace_export
from ..process.config import (
    DEFAULT_APP_NAME,
    Settings,
    requested_executor_id,
    resolve_app_version,
    resolve_database_url,
    resolve_store_retry_window,
)
from ..process.executor_lock import ExecutorLock
from ..process.pools import Footprint, PoolSetting, check_pool
from . import admitted_start, entries
from .agents import adapt, collect_agents
from .drain import Stopping
from .executor_leases import ExecutorLeases
from .launched import MODES, Mode
from .modes import Modes
from .reader import Reader

if TYPE_CHECKING:
    from ..flow.live import LiveValue

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
log = logging.getLogger("helix_dbos")

ResumeMode = Literal["continue", "with_message", "from_checkpoint"]
StopKind = Literal["interrupt", "abort"]


def _async_twin(fn: Callable[P, R]) -> Callable[P, Any]:
    @functools.wraps(fn)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(fn, *args, **kwargs)

    twin.__doc__ = f"Async twin of ``{fn.__name__}`` (runs it in a worker thread)."
    return twin


def _positive_int(value: object) -> bool:
    return type(value) is int and value >= 1


def _check_entry_input(message: str | None, checkpoint_id: str | None) -> None:
    """What an entry takes besides the session id: refused before the gate, so nothing is written.
    A message, where one is given, is not empty (the API's ``minLength: 1``): an empty turn would
    be stored and sent to the model as if the user had said something."""
    check_text("message", message)
    if message == "":
        raise ValidationError("the message must not be empty", detail={"field": "message"})
    check_text("checkpoint_id", checkpoint_id, 80)


class RunHandle:
    """A run that was started; ``result()`` waits until it completes, fails, stops or suspends."""

    def __init__(self, runtime: Runtime, run_id: str, session_id: str, workflow_handle: Any = None) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.session_id = session_id
        # DBOS's handle of the run's workflow. Its end only wakes the wait: the ledger, not the
        # workflow's end, says when a run is at rest (a suspended run's workflow has ended; a run
        # stopped from outside can be at rest while its workflow still unwinds).
        self._workflow_handle = workflow_handle

    def result(self, timeout: float | None = None) -> RunResult:
        """The run once at rest, read from the ledger; ``RunTimeoutError`` if not within ``timeout``.

        With or without a timeout it is the same wait as ``Runtime.wait_run``, and a database outage
        is ridden out for ``store_retry_window`` either way; a run started in this process is waited
        for on its workflow's end rather than by polling the ledger, and when that workflow brought
        the run to rest itself, its last transaction's read of the result is the answer (no read).
        """
        return self.runtime.reader.wait_run(self.run_id, timeout, ended=dbos_private.workflow_future(self._workflow_handle))

    async def result_async(self, timeout: float | None = None) -> RunResult:
        return await asyncio.to_thread(self.result, timeout)

    def __repr__(self) -> str:
        return f"RunHandle(run_id={self.run_id!r}, session_id={self.session_id!r})"


class AnswerReceipt:
    """What an answer did: recorded, and (when it was the last one awaited) the run that continues."""

    def __init__(self, session_id: str, dispatch_id: str, remaining: list[str], run: RunHandle | None) -> None:
        self.session_id = session_id
        self.dispatch_id = dispatch_id
        self.remaining = remaining
        self.run = run

    def __repr__(self) -> str:
        return f"AnswerReceipt(dispatch_id={self.dispatch_id!r}, remaining={self.remaining!r}, run={self.run!r})"


#: What a ``Runtime`` is configured with: read once by ``launch()``, so fixed from then on (a change
#: after launch would silently do nothing; before launch, an operator tool may still repoint it).
CONFIGURATION: frozenset[str] = frozenset({
    "agents", "api_pool", "auto_continue", "database_url", "dbos_pool", "live_output", "pooler_url", "queue_name", "recovery",
    "serve_queue", "store_retry_window", "takeover", "takeover_after", "tx_pool",
    "mode", "limits", "worker_concurrency", "owner_share",
})


class Runtime(Modes, ExecutorLeases, Stopping):
    """Agents as DBOS workflows over the Helix ledger. One per process (DBOS is one per process)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in CONFIGURATION and (getattr(self, "_registry", None) is not None or getattr(self, "_engine", None) is not None):
            raise ConfigurationError(f"Runtime.{name} is fixed once the runtime is launched; set it before launch()")
        object.__setattr__(self, name, value)

    def __init__(
        self,
        agents: Iterable[Agent | Any],
        *,
        tool_policies: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
        deps_factories: Mapping[str, Callable[[Any], Any]] | None = None,
        live_output: bool | None = None,
        recovery: Profile = "full",
        database_url: str | None = None,
        executor_id: str | None = None,
        application_version: str | None = None,
        app_name: str = DEFAULT_APP_NAME,
        queue_name: str = RUNS_QUEUE,
        auto_continue: bool = True,
        serve_queue: bool | None = None,
        store_retry_window: float | None = None,
        takeover_after: float | None = None,
        takeover: bool = True,
        api_pool: PoolSetting | None = None,
        tx_pool: PoolSetting | None = None,
        dbos_pool: PoolSetting | None = None,
        pooler_url: str | None = None,
        mode: Mode | None = None,
        limits: Mapping[str, AgentLimits] | None = None,
        worker_concurrency: int | None = None,
        owner_share: int | None = None,
    ) -> None:
        if recovery not in ("full", "dbos_compat"):
            raise ConfigurationError(f"recovery must be 'full' or 'dbos_compat', not {recovery!r}")
        # tool_policies / deps_factories: by agent name, for the pydantic-ai agents handed in as they are
        self.agents = collect_agents(adapt(agents, tool_policies, deps_factories))
        # Postgres connection pools, a size (or (pool_size, max_overflow), whose overflow churns):
        # the API engine (callers' entries, answers, reads), the workflows' ledger transactions and
        # DBOS's system database; None: HELIX_DBOS_*_POOL, else sized from the mode and
        # worker_concurrency at launch (process/pools.py; the sum: docs/operations.md)
        for name, pool in (("api_pool", api_pool), ("tx_pool", tx_pool), ("dbos_pool", dbos_pool)):
            check_pool(name, pool)
        self.api_pool, self.tx_pool, self.dbos_pool = api_pool, tx_pool, dbos_pool
        # A PgBouncer (transaction mode) in front of the same database, for the API and transaction
        # pools only: the executor lock (a session lock) and DBOS (its LISTEN) need sessions of
        # their own, so they keep database_url. None: HELIX_DBOS_POOLER_URL, else database_url.
        self.pooler_url = pooler_url
        # best-effort model output deltas on the run's DBOS stream (runtime/flow/live.py)
        environment = from_environ()  # a bad HELIX_DBOS_* value is refused here, typed, before anything
        self.live_output = live_output if live_output is not None else environment.live_output
        self.recovery: Profile = recovery
        self.database_url = database_url  # public: an operator tool (--db) may repoint it before launch
        self._executor_id = executor_id
        self._app_version = application_version
        self._app_name = app_name
        self.queue_name = queue_name
        self.auto_continue = auto_continue
        # Whether this process dequeues remote children and companion turns from ``queue_name``.
        # None (auto): only if one of its agents has a remote or companion sub-agent, since polling
        # the queue is most of an idle runtime's database traffic (docs/operations.md) and, in a busy
        # worker, ~6 ms of CPU a run (docs/benchmarks.md); a process that defines only the child
        # agents says True. False: starts and recovers its own runs only (a worker: serves its entry
        # queues only). The same rule in every mode: only a run of an agent with such a sub-agent
        # enqueues there, and the process running it defines that agent, so it serves the queue.
        self.serve_queue = serve_queue if serve_queue is not None else polling.serves_children_queue(self.agents.values())
        # Seconds of transient database errors (outage, dropped connections, busy SQLite) that runs
        # and waits ride out before failing ``store_unavailable``; None: env or 60 s (config.py).
        self.store_retry_window = resolve_store_retry_window(store_retry_window, environment)
        # Seconds this process may go without confirming its executor lock before it exits (and
        # another may act for its id); None: HELIX_DBOS_TAKEOVER_AFTER, default 30.
        if takeover_after is not None and not (0.5 <= float(takeover_after) <= 86400):
            raise ConfigurationError(f"takeover_after must be from 0.5 to 86400 seconds, not {takeover_after!r}")
        self.takeover_after = takeover_after
        self.settings: Settings | None = None
        self._engine: sa.Engine | None = None
        self._lock: ExecutorLock | None = None
        self._owns_dbos = False
        self._tx_engine: sa.Engine | None = None
        # Watch for gone executors and take over their pending runs (False: only this executor's own).
        self.takeover = takeover
        self._takeover: leases.Takeover | None = None
        self._polling: polling.InternalQueuePolling | None = None
        self._let_go_of_anyio_root: Callable[[], None] | None = None
        self._lease_generation: int | None = None
        # What this launch hands down (its Env, workflows, lock); installed as the process's one.
        self._registry: Registry | None = None
        # The process's shape (public, like database_url: `helix-dbos worker` / `serve --front-end` set
        # it before launch); None: HELIX_DBOS_MODE, else "process" (docs/scaling.md).
        if mode is not None and mode not in MODES:
            raise ConfigurationError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode: Mode | None = mode
        # Per-agent limits that hold across every process on the database (definitions/limits.py).
        self.limits: dict[str, AgentLimits] = dict(limits or {})
        for name, lim in self.limits.items():
            if name not in self.agents:
                raise ConfigurationError(f"limits name an agent this runtime does not define: {name!r}")
            if not isinstance(lim, AgentLimits):
                raise ConfigurationError(f"limits[{name!r}] must be an hx.AgentLimits, not {type(lim).__name__}")
        delegates = {name: [sub.agent.name for sub in agent.sub_agents if sub.mode != "local"] for name, agent in self.agents.items()}
        cycles = queues.delegation_cycles(delegates, self.limits)
        if cycles:
            raise ConfigurationError(
                f"max_running on {cycles[0][0]!r} could deadlock: it delegates to itself ({' -> '.join(cycles[0])}), and a parent "
                "holds its slot while it waits for its child, so the children could wait for slots only their parents hold; "
                "limit an agent that is not on a delegation cycle (docs/scaling.md, \"Where it stops\")"
            )
        for label, value in (("worker_concurrency", worker_concurrency), ("owner_share", owner_share)):
            if value is not None and not _positive_int(value):
                raise ConfigurationError(f"{label} must be an int >= 1, not {value!r}")
        # Runs one worker runs at once from the entry queues (DBOS worker_concurrency; the same for
        # every worker: it is the queue's row), and of those, runs of one owner (None: no cap).
        self.worker_concurrency = worker_concurrency
        self.owner_share = owner_share
        self._environment = None
        self._client: Any = None  # the DBOSClient an entry enqueues through (its transaction is the gate's)
        self._footprint: Footprint | None = None  # the connections this launch holds (process/pools.py)
        self._mode: Mode = "process"

    # --- lifecycle -----------------------------------------------------------------------------

    def launch(self) -> Runtime:
        """Configure DBOS (unless the app did), migrate the ledger, launch, and wake this executor's runs.

        One runtime per process: while another is launched (not yet shut down) this raises
        ``RuntimeAlreadyLaunchedError`` before touching anything. A launch that fails part-way
        releases what it took (``shutdown``), so the process can launch again. A database that is
        missing, unreachable or silent is a typed ``ConfigurationError`` (or ``StoreUnavailableError``
        for another transient error), as the CLI prints it, never the driver's exception.
        """
        live = process_registry.installed()
        if live is not None:
            raise process_registry.already_launched_error(live)
        try:
            return self._launch()
        except BaseException as exc:
            self.shutdown(wait_seconds=0)
            typed = launch_refusal(exc)
            if typed is not None:  # the database's refusal, typed as the CLI says it (store_retry.launch_refusal)
                raise typed from None
            raise

    def _launch(self) -> Runtime:
        # The variables as this launch reads them: handed down on the registry's Env (settings.py).
        environment = self._environment = from_environ()
        self._mode = self._resolve_mode(environment)
        if self._mode == "client":
            self._launch_client(environment)
            return self
        existing = dbos_private.configured_dbos()
        url = resolve_database_url(self.database_url, environment=environment)
        recovery_poll = environment.recovery_poll
        traces = list(environment.otlp_traces_endpoints)
        if traces:  # before DBOS launches: its recovery starts workflows at once
            trace_export.install(traces, self._app_name)
        if existing is not None and self.database_url is None:
            url = dbos_private.dbos_config(existing).get("system_database_url") or url
        if is_sqlite(url):
            ensure_sqlite_wal(url)
        upgrade(url)
        self._agree_on_limits(url, environment)  # before anything is registered, served or enqueued
        self._lock = ExecutorLock(url, lease=self.takeover_after if self.takeover_after is not None else environment.takeover_after)
        wanted = requested_executor_id(self._executor_id, environment)
        executor_id = self._lock.acquire(wanted)
        self._lock.watch()  # a lost lock is re-acquired before any more bodies run, or the process exits
        self.settings = Settings(
            url,
            executor_id,
            resolve_app_version(self._app_version, environment),
            self._app_name,
            store_retry_window=self.store_retry_window,
            log_level=environment.log_level,
        )
        footprint = self._footprint = self._plan_connections(url, environment, existing)
        if existing is None:
            DBOS(config=self.settings.dbos_config(footprint.dbos, pools.application_name(self._mode, "dbos", executor_id)))
            self._owns_dbos = True
            self._polling = polling.InternalQueuePolling(recovery_poll)
            listen = self._listened_queues()
            if listen is not None:
                DBOS.listen_queues(listen)  # DBOS's own internal queues (recovery) are always served
        self._engine = self._create_api_engine(url, environment, footprint.api, executor_id)
        self._tx_engine = self._create_tx_engine(url, environment, footprint, executor_id)
        env = process_registry.Env(
            agents=self.agents,
            profile=self.recovery,
            settings=self.settings,
            tx_engine=self._tx_engine,
            engine=self._engine,
            queue_name=self.queue_name,
            live_output=self.live_output,
            environment=environment,
            limits=self.limits,
        )
        registry = Registry(env, self._lock)
        workflow.register(registry)  # the run and companion workflows, bound to this registry
        process_registry.install(registry)  # before DBOS.launch: recovery starts workflows at once
        self._registry = registry
        if self._polling is not None:  # before DBOS.launch, whose recovery fills the internal queue
            with self._engine.connect() as conn:
                backlog = dbos_private.internal_queue_backlog(conn, executor_id)
            self._polling.fast() if backlog else self._polling.settle()
        if not dbos_private.dbos_launched():
            DBOS.launch()
        self._let_go_of_anyio_root = anyio_root.hold_root(dbos_private.background_workflow_loop())
        DBOS.register_queue(self.queue_name, polling_interval_sec=0.05 if is_sqlite(url) else 0.1)
        if self._mode == "worker" or self.limits:
            from dbos import DBOSClient, DBOSPortableJSONSerializer

            queues.register_entry_queues(DBOS.register_queue, self.agents, self.limits, self._queue_settings(url))
            self._client = DBOSClient(system_database_engine=self._engine, application_name=self._app_name, serializer=DBOSPortableJSONSerializer())
        self._settle_cancelled_runs()
        self._start_lease(executor_id)
        return self

    def _create_tx_engine(self, url: str, environment: EnvSettings, footprint: Footprint, executor_id: str) -> sa.Engine:
        """The engine of the workflows' ledger transactions, on its own blocking pool (so API
        callers' threads and the workflows' transactions never starve each other)."""
        tx = footprint.tx or pools.Pool(pools.DEFAULT_TX_POOL)  # SQLite: no server, no pool sizes (_pool_args)
        return self._pooled_engine(url, environment, tx, pools.application_name(self._mode, "tx", executor_id))

    def _plan_connections(self, url: str, environment: EnvSettings, existing: Any) -> Footprint:
        """The pools this launch opens (process/pools.py): DBOS's as the app configured it when it
        did, else sized here; the listener where DBOS listens (Postgres with LISTEN/NOTIFY)."""
        api = pools.api_pool(self._mode, check_pool("api_pool", self.api_pool), environment)
        tx = pools.tx_pool(check_pool("tx_pool", self.tx_pool), environment, self.worker_concurrency)
        dbos = pools.dbos_pool(check_pool("dbos_pool", self.dbos_pool), environment)
        listens = True
        if existing is not None:
            config = dbos_private.dbos_config(existing)  # processed: the engine's kwargs as DBOS made them
            kwargs = (config.get("database") or {}).get("sys_db_engine_kwargs") or {}
            dbos = pools.Pool(int(kwargs.get("pool_size") or 20), int(kwargs.get("max_overflow") or 0))
            listens = config.get("use_listen_notify") is not False
        if is_sqlite(url):
            return pools.NO_CONNECTIONS
        return Footprint(self._mode, api, tx, dbos, 1 if listens else 0, 1)

    def __enter__(self) -> Runtime:
        return self.launch()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # --- entries -------------------------------------------------------------------------------

    def _entry_tx(self, what: str, fn: Callable[[sa.Connection], T], applied: Callable[[sa.Connection], T | None]) -> T:
        """``fn`` (an entry's, an answer's or a stop's transaction) through a store outage, exactly once.

        Tried again for ``store_retry_window`` on a transient error, as the runs' transactions and
        the reads are; past it ``StoreUnavailableError`` (``store_unavailable``), never the driver's
        error. A commit whose acknowledgement was lost may have committed, and applying the entry a
        second time would open a second run, or refuse its own run as ``session_running``. So each
        entry mints, before its first try, the ids its rows are written under (the run id, a new
        session's id, the answer's or the stop's time), and every try after the first asks
        ``applied(conn)`` first: the outcome of an earlier try that committed, read back from those
        rows, or None. The first try, the only one almost every entry makes, writes nothing more
        than the entry itself.
        """
        tried = False

        def attempt() -> T:
            nonlocal tried
            with self.engine.begin() as conn:
                if tried:
                    done = applied(conn)
                    if done is not None:  # the earlier try committed; only its acknowledgement was lost
                        return done
                tried = True
                return fn(conn)

        return retrying_sync(what, attempt, self.store_retry_window)

    def _enter(self, entry: EntryKind, *, session_id: str | None, agent_name: str | None = None, message: str | None = None, checkpoint_id: str | None = None, deps: Any = None, owner: str | None = None, priority: int | None = None) -> RunHandle:
        if deps is not None:
            from ..floor.transcript import jsonable

            ok, why = jsonable(deps)
            if not ok:
                raise ValidationError(f"deps must be JSON (a deps factory rebuilds the object in any process): {why}")
        # minted before the first try: a retry finds the run (and a new session) by these ids
        run_id, new_session_id = new_id(), new_id() if session_id is None else None

        def admit(conn: sa.Connection) -> OpenedRun:
            opened = entries.open_run(
                conn,
                entries.EntryRequest(entry=entry, session_id=session_id, agent_name=agent_name, message=message, checkpoint_id=checkpoint_id,
                                     owner=owner, run_id=run_id, new_session_id=new_session_id),
                entries.Admission(agents=self.agents, profile=self.recovery, executor_id=None if self._mode == "client" else self.executor_id,
                                  is_dead=self._run_is_dead, queued=self._enqueues),
            )
            if deps is not None:  # in the admitting transaction: the run reads exactly what its start stored
                from ..flow.scopes import store_deps

                store_deps(conn, opened.session_id, opened.run_id, deps)
            if opened.queued:  # the workflow's row in the same transaction: admitted iff queued
                self._enqueue(conn, opened, priority)
            return opened

        opened = self._entry_tx(f"admitting a {entry} entry", admit, lambda conn: entries.opened_run(conn, run_id, self._enqueues))
        if opened.queued:
            return RunHandle(self, opened.run_id, opened.session_id)
        try:
            handle = admitted_start.start(self._launched_registry(), self.engine, self.store_retry_window, opened.run_id, opened.session_id)
        except StoreUnavailableError:
            raise  # the store is gone: no release could be written either (see admitted_start.start)
        except Exception as exc:  # release the gate at once rather than leave an orphan for 30 s
            self._release(opened.run_id, f"{type(exc).__name__}: {exc}")
            raise
        return RunHandle(self, opened.run_id, opened.session_id, handle)

    def _release(self, run_id: str, failed: str) -> None:
        """End ``run_id`` ``start_failed``, if it is still live (its workflow never started): a retry
        after a lost acknowledgement, or a workflow that did start after all, finds it ended or
        running on and leaves it be."""

        def release(conn: sa.Connection) -> None:
            run = get_run(conn, run_id)
            if run is not None and run["status"] in RUN_LIVE:
                end_run(conn, run_id, "failed", error_code="start_failed", error=failed)

        self._entry_tx("releasing a run that did not start", release, lambda conn: None)

    def start(self, agent_name: str, message: str, session_id: str | None = None, deps: Any = None, *, owner: str | None = None, priority: int | None = None) -> RunHandle:
        """Start a session, or a new turn of ``session_id`` (which redirects any unanswered step).

        ``deps``: JSON stored for the session's runs; a pydantic-ai agent's deps factory rebuilds
        ``RunContext.deps`` from it in whichever process runs a step (kept until a start replaces it).

        ``owner`` (the service's authenticated principal) is stamped on a new session; an existing
        ``session_id`` owned by someone else is then ``session_not_found``. It is also the run's
        fairness partition on the queue, when the run is enqueued (docs/scaling.md); ``priority``
        (DBOS's, lower first, 1 to 2**31-1; none is DBOS's 0, ahead of every given one) orders an
        enqueued run within its owner's partition. Every entry takes it (``resume``, ``retry``, the
        answer that continues a run); a run started in this process waits on no queue, so there it
        orders nothing.
        """
        if session_id is not None:
            check_session_id(session_id)
        _check_entry_input(message, None)
        check_priority(priority)
        return self._enter("start", session_id=session_id, agent_name=agent_name, message=message, deps=deps, owner=owner, priority=priority)

    def resume(self, session_id: str, mode: ResumeMode = "continue", message: str | None = None, checkpoint_id: str | None = None, *, priority: int | None = None) -> RunHandle:
        """Recover the saved step (``continue``), redirect it (``with_message``) or rewind to a saved
        append (``from_checkpoint``); ``priority`` as for ``start``."""
        check_session_id(session_id)
        _check_entry_input(message, checkpoint_id)
        check_priority(priority)
        if mode == "continue":
            if message is not None or checkpoint_id is not None:
                raise ValidationError("resume(mode='continue') takes neither a message nor a checkpoint")
            return self._enter("resume_continue", session_id=session_id, priority=priority)
        if mode == "with_message":
            return self._enter("resume_with_message", session_id=session_id, message=message, priority=priority)
        if mode == "from_checkpoint":
            if not checkpoint_id:
                raise ValidationError("resume(mode='from_checkpoint') needs a checkpoint_id")
            return self._enter("resume_from_checkpoint", session_id=session_id, checkpoint_id=checkpoint_id, priority=priority)
        raise ValidationError(f"unknown resume mode {mode!r}")

    def retry(self, session_id: str, message: str | None = None, checkpoint_id: str | None = None, *, priority: int | None = None) -> RunHandle:
        """After a failed or interrupted run: recover it, or redirect it with ``message`` (at
        ``checkpoint_id`` if given); ``priority`` as for ``start``."""
        check_session_id(session_id)
        _check_entry_input(message, checkpoint_id)
        check_priority(priority)
        if checkpoint_id is not None:
            if not message:
                raise ValidationError("retry(checkpoint_id=...) needs a message: the message redirects the saved step")
            return self._enter("retry_from_checkpoint", session_id=session_id, message=message, checkpoint_id=checkpoint_id, priority=priority)
        if message is not None:
            return self._enter("retry_with_message", session_id=session_id, message=message, priority=priority)
        return self._enter("retry", session_id=session_id, priority=priority)

    # --- answers and stop ----------------------------------------------------------------------

    def _answer(self, session_id: str, dispatch_id: str, priority: int | None, **kw: Any) -> AnswerReceipt:
        check_session_id(session_id)
        check_text("dispatch_id", dispatch_id, 64)
        check_priority(priority)
        at = now()  # the answer's time, minted before the first try: a retry finds its answer by it
        out = self._entry_tx("recording an answer", lambda conn: entries.answer(conn, entries.AnswerRequest(session_id=session_id, dispatch_id=dispatch_id, at=at, **kw)),
                             lambda conn: entries.answered(conn, session_id=session_id, dispatch_id=dispatch_id, at=at))
        run = None
        if out.all_answered and self.auto_continue:
            run = self._enter("resume_continue", session_id=session_id, priority=priority)
        return AnswerReceipt(session_id, dispatch_id, out.remaining, run)

    def approve(self, session_id: str, dispatch_id: str, approved: bool = True, reason: str | None = None, actor: str | None = None, *, priority: int | None = None) -> AnswerReceipt:
        """Decide a pending approval; the last answer continues the run (approved bodies then run),
        enqueued with ``priority`` (as for ``start``) where it is enqueued."""
        check_text("reason", reason)
        check_text("actor", actor, 200)
        return self._answer(session_id, dispatch_id, priority, kind="approval", approved=approved, reason=reason, actor=actor)

    def submit_tool_result(self, session_id: str, dispatch_id: str, result: Any = None, error: str | None = None, *, priority: int | None = None) -> AnswerReceipt:
        """Settle a pending client-tool call with its result (or its error); ``priority`` as for ``approve``.

        The result is a tool's output, kept exactly as a server tool's is (``ledger/escape.py``): NUL
        and lone surrogates in its strings and keys included. The error is caller text (``check_text``)."""
        check_text("error", error)
        return self._answer(session_id, dispatch_id, priority, kind="client", result=result, error=error)

    def stop(self, session_id: str, kind: StopKind = "interrupt", requested_by: str | None = None) -> StopReceipt:
        """Record a durable stop for the session's current run and return at once.

        A suspended run stops in this call (``stopped=True``, ``status`` its end); a running one at
        its next boundary (``status`` ``stop_requested``): ``wait(session_id)`` sees it end.
        """
        check_session_id(session_id)
        check_text("requested_by", requested_by, 200)
        at = now()  # the stop record's time, minted before the first try: a retry finds its record by it
        out = self._entry_tx("recording a stop", lambda conn: entries.stop(
            conn, session_id=session_id, kind=kind, requested_by=requested_by, agents=self.agents, profile=self.recovery, at=at),
            lambda conn: entries.stopped(conn, session_id=session_id, at=at))
        return StopReceipt(session_id=session_id, run_id=out.run_id, kind=kind, stopped=out.stopped, status=out.status)

    # --- reads ---------------------------------------------------------------------------------

    @property
    def reader(self) -> Reader:
        """Every read of this runtime's ledger (what the service and the CLI read through too)."""
        return Reader(self.engine, store_retry_window=self.store_retry_window, settled=self._registry.env.settled if self._registry else None)

    def wait_run(self, run_id: str, timeout: float | None = None) -> RunResult:
        """The run once at rest; ``RunTimeoutError`` (also a ``TimeoutError``) past ``timeout``."""
        check_text("run_id", run_id)
        return self.reader.wait_run(run_id, timeout)

    def wait(self, session_id: str, timeout: float | None = None) -> RunResult:
        """The session's latest run once it is at rest (also a run a relaunch recovered)."""
        check_session_id(session_id)
        return self.reader.wait(session_id, timeout)

    def run_here(self, agent_name: str, message: str, session_id: str | None = None, deps: Any = None, *,
                 owner: str | None = None, priority: int | None = None, timeout: float | None = None) -> RunResult:
        """``start``, then wait for the run with its agent's own code running on this thread.

        As pydantic-ai's ``agent.run_sync`` does, the agent's coroutines (async tool bodies,
        ``@agent.instructions`` functions, output validators) run on an event loop this thread
        serves while it waits, so resources bound to this thread work in them (a ``sqlite3``
        connection opened here, say). The model request, the ledger and recovery stay on DBOS's
        loop; a run recovered after a crash, or still going after ``timeout`` (``RunTimeoutError``;
        it goes on), runs its code on DBOS's loop as ``start``'s runs do. Not in a front end
        (``mode="client"``): its runs run in a worker."""
        if self.is_front_end:
            raise ConfigurationError("run_here runs the agent's code on the caller's thread, but a front end (mode='client') runs no run: use start()")
        session_id = session_id or new_id()
        check_session_id(session_id)
        loop = asyncio.new_event_loop()
        try:
            with home.serving(session_id, loop):
                handle = self.start(agent_name, message, session_id, deps, owner=owner, priority=priority)
                return loop.run_until_complete(handle.result_async(timeout))
        finally:
            home.drain(loop)  # the home is withdrawn by now: finish here what was already handed to it
            loop.close()

    async def run_here_async(self, agent_name: str, message: str, session_id: str | None = None, deps: Any = None, *,
                             owner: str | None = None, priority: int | None = None, timeout: float | None = None) -> RunResult:
        """``run_here`` for async callers: the agent's coroutines run on the caller's own loop."""
        if self.is_front_end:
            raise ConfigurationError("run_here runs the agent's code on the caller's loop, but a front end (mode='client') runs no run: use start()")
        session_id = session_id or new_id()
        check_session_id(session_id)
        with home.serving(session_id, asyncio.get_running_loop()):
            handle: RunHandle = await self.start_async(agent_name, message, session_id, deps, owner=owner, priority=priority)
            return await handle.result_async(timeout)

    def session(self, session_id: str) -> SessionView:
        check_session_id(session_id)
        return self.reader.session(session_id)

    def get_run(self, run_id: str) -> RunResult:
        """A run's result as the ledger holds it now (it only reads: entries are ``start``, ``resume``...)."""
        check_text("run_id", run_id)
        return self.reader.run(run_id)

    def live(self, run_id: str, timeout: float | None = None) -> Iterator[LiveValue]:
        """The run's model output as it streams (``live_output``), best-effort, until its workflow
        ends; ``TimeoutError`` when no value comes within ``timeout`` seconds.

        The values are rows of the system database that whichever process runs the step writes, so
        any process reads them: a front end (which launches no DBOS) through its ``DBOSClient``."""
        check_text("run_id", run_id)
        self.engine  # noqa: B018 - ConfigurationError before launch, as every read
        # imported here: it brings pydantic-ai, which waits for a run that needs it (tests/processes/test_import_cost.py)
        from ..flow import live as live_stream

        return live_stream.read(run_id, timeout, client=self._client if self.is_front_end else None)

    async def live_async(self, run_id: str, timeout: float | None = None) -> AsyncGenerator[LiveValue, None]:
        """``live`` on the caller's event loop."""
        check_text("run_id", run_id)
        self.engine  # noqa: B018
        from ..flow import live as live_stream

        async for value in live_stream.read_async(run_id, timeout, client=self._client if self.is_front_end else None):
            yield value

    start_async = _async_twin(start)
    resume_async = _async_twin(resume)
    retry_async = _async_twin(retry)
    approve_async = _async_twin(approve)
    submit_tool_result_async = _async_twin(submit_tool_result)
    stop_async = _async_twin(stop)
    wait_async = _async_twin(wait)
    wait_run_async = _async_twin(wait_run)
    session_async = _async_twin(session)
    get_run_async = _async_twin(get_run)
    launch_async = _async_twin(launch)
    shutdown_async = _async_twin(Stopping.shutdown)
