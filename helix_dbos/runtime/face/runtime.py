"""The ``Runtime``: configure and launch DBOS, open runs through the gate, answer, stop, read.

Sync methods block the caller's thread; each has an ``_async`` twin that runs it in a worker
thread, so the blocking engine never runs on an event loop and workflows always run on DBOS's own.

A ``Runtime`` holds two things: its configuration (``config.py``'s frozen ``RuntimeConfig``, built
once from its arguments) and, once launched, the parts its mode composes (``launched.py``'s frozen
``Launched``: the store, an ``Enqueuer``, a ``Runner``; ``shape.py`` says which mode has which,
``launch.py`` builds them, ``drain.py`` takes them down). docs/architecture.md walks a run through them.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

import sqlalchemy as sa

from ...definitions import Agent, home
from ...definitions.inputs import check_priority, check_session_id, check_text
from ...definitions.limits import AgentLimits
from ...errors import ConfigurationError, StoreUnavailableError, ValidationError
from ...ledger.names import RUNS_QUEUE
from ...ledger.rows import new_id, now
from ...ledger.statuses import EntryKind
from ...recovery import Profile
from ...settings import Mode, from_environ
from ...views import RunResult, SessionView, StopReceipt
from ..floor import registry as process_registry
from ..floor.records import OpenedRun
from ..floor.store_retry import launch_refusal
from ..process.config import DEFAULT_APP_NAME, Settings
from ..process.pools import PoolSetting
from . import admitted_start, entries, executor_leases
from . import drain as draining
from .agents import adapt, collect_agents
from .config import Configured, RuntimeConfig
from .entry_kinds import ResumeMode, resume_entry, retry_entry
from .entry_transaction import check_entry_input, entry_transaction, release
from .handles import AnswerReceipt, RunHandle
from .launch import launch
from .launched import Launched
from .reader import Reader

if TYPE_CHECKING:
    from ..flow.live import LiveValue

__all__ = ["CONFIGURATION", "AnswerReceipt", "RunHandle", "Runtime"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

StopKind = Literal["interrupt", "abort"]


def _async_twin(fn: Callable[P, R]) -> Callable[P, Any]:
    @functools.wraps(fn)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(fn, *args, **kwargs)

    twin.__doc__ = f"Async twin of ``{fn.__name__}`` (runs it in a worker thread)."
    return twin


class Runtime:
    """Agents as DBOS workflows over the Helix ledger. One per process (DBOS is one per process)."""

    # The configuration, as attributes (each field is documented on ``config.RuntimeConfig``).
    agents: Configured[dict[str, Agent]] = Configured()
    api_pool: Configured[PoolSetting | None] = Configured()
    tx_pool: Configured[PoolSetting | None] = Configured()
    dbos_pool: Configured[PoolSetting | None] = Configured()
    pooler_url: Configured[str | None] = Configured()
    live_output: Configured[bool] = Configured()
    recovery: Configured[Profile] = Configured()
    database_url: Configured[str | None] = Configured()
    queue_name: Configured[str] = Configured()
    auto_continue: Configured[bool] = Configured()
    serve_queue: Configured[bool] = Configured()
    store_retry_window: Configured[float] = Configured()
    takeover_after: Configured[float | None] = Configured()
    takeover: Configured[bool] = Configured()
    mode: Configured[Mode | None] = Configured()
    limits: Configured[dict[str, AgentLimits]] = Configured()
    worker_concurrency: Configured[int | None] = Configured()
    owner_share: Configured[int | None] = Configured()

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
        collected = collect_agents(adapt(agents, tool_policies, deps_factories))
        self._config = RuntimeConfig.of(
            collected,
            from_environ(),  # a bad HELIX_DBOS_* value is refused here, typed, before anything
            live_output=live_output, serve_queue=serve_queue, store_retry_window=store_retry_window, limits=dict(limits or {}),
            recovery=recovery, database_url=database_url, executor_id=executor_id, application_version=application_version,
            app_name=app_name, queue_name=queue_name, auto_continue=auto_continue, takeover_after=takeover_after, takeover=takeover,
            api_pool=api_pool, tx_pool=tx_pool, dbos_pool=dbos_pool, pooler_url=pooler_url, mode=mode,
            worker_concurrency=worker_concurrency, owner_share=owner_share,
        )
        self._launched: Launched | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def launch(self) -> Runtime:
        """Configure DBOS (unless the app did), migrate the ledger, launch, and wake this executor's runs.

        One runtime per process: while another is launched (not yet shut down) this raises
        ``RuntimeAlreadyLaunchedError`` before touching anything. A launch that fails part-way
        releases what it took, so the process can launch again. A database that is missing,
        unreachable or silent is a typed ``ConfigurationError`` (or ``StoreUnavailableError`` for
        another transient error), as the CLI prints it, never the driver's exception.
        """
        live = process_registry.installed()
        if live is not None:
            raise process_registry.already_launched_error(live)
        try:
            # The variables as this launch reads them: handed down to every part (settings.py).
            self._launched = launch(self._config, from_environ())
        except BaseException as exc:
            typed = launch_refusal(exc)
            if typed is not None:  # the database's refusal, typed as the CLI says it (store_retry.launch_refusal)
                raise typed from None
            raise
        return self

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
        if self._launched is not None:
            try:
                draining.shutdown(self._launched, wait_seconds)
            finally:
                self._launched = None

    def drain(self, timeout: float = 30.0, *, hurry: threading.Event | None = None) -> list[str]:
        """Stop dequeuing, let the runs in flight here finish for up to ``timeout`` seconds, shut down.

        What SIGTERM does to ``helix-dbos worker``. Runs never dequeued stay on their queue for the
        other workers; a run still in flight at the deadline stays ``PENDING`` under this executor
        and is taken over by another worker once this one's lease is released (at shutdown), where
        the recovery rules decide its calls. Returns the ids of the runs left in flight.
        ``hurry`` (set: the operator's second signal) ends the wait at once, as the deadline would.
        """
        if self._launched is None:
            return []
        try:
            return draining.drain(self._launched, timeout, hurry)
        finally:
            self._launched = None

    def __enter__(self) -> Runtime:
        return self.launch()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def _ready(self) -> Launched:
        if self._launched is None:
            raise ConfigurationError("the runtime is not launched; call runtime.launch()")
        return self._launched

    @property
    def engine(self) -> sa.Engine:
        return self._ready().engine

    @property
    def settings(self) -> Settings | None:
        """The settings the launch resolved (database URL, executor id, version), or None before launch."""
        return self._launched.settings if self._launched is not None else None

    @property
    def is_front_end(self) -> bool:
        """Launched as a front end (``mode="client"``): it admits and enqueues, and runs nothing."""
        return self._launched is not None and self._launched.runner is None

    @property
    def executor_id(self) -> str:
        if self._launched is None:
            raise ConfigurationError("the runtime is not launched, so it has no executor id yet; call runtime.launch()")
        if self._launched.runner is None:
            raise ConfigurationError("a front end (mode='client') has no executor: it runs nothing")
        return self._launched.runner.executor_id

    def connection_footprint(self) -> dict[str, int]:
        """The Postgres connections this launched process holds at most, by pool, and their
        ``total`` (docs/operations.md, "Database connections"): what to size ``max_connections``
        by. A pool without overflow opens its connections once and keeps them. All 0 on SQLite."""
        return self._ready().footprint.as_dict()

    def recover_executor(self, executor_id: str) -> list[str]:
        """Take over a dead executor's pending runs (its process must be gone: ids are never shared)."""
        launched = self._ready()
        return executor_leases.recover_executor(launched.engine, launched.settings.database_url, self.executor_id, executor_id,
                                                launched.environment.takeover_after)

    # --- entries -------------------------------------------------------------------------------

    def _entry_tx(self, what: str, fn: Callable[[sa.Connection], T], applied: Callable[[sa.Connection], T | None]) -> T:
        """``fn`` through a store outage, exactly once (``entry_transaction.py``)."""
        return entry_transaction(self.engine, self._config.store_retry_window, what, fn, applied)

    def _enter(self, entry: EntryKind, *, session_id: str | None, agent_name: str | None = None, message: str | None = None, checkpoint_id: str | None = None, deps: Any = None, owner: str | None = None, priority: int | None = None) -> RunHandle:
        if deps is not None:
            from ..floor.transcript import jsonable

            ok, why = jsonable(deps)
            if not ok:
                raise ValidationError(f"deps must be JSON (a deps factory rebuilds the object in any process): {why}")
        # minted before the first try: a retry finds the run (and a new session) by these ids
        run_id, new_session_id = new_id(), new_id() if session_id is None else None
        launched = self._ready()

        def admit(conn: sa.Connection) -> OpenedRun:
            opened = entries.open_run(
                conn,
                entries.EntryRequest(entry=entry, session_id=session_id, agent_name=agent_name, message=message, checkpoint_id=checkpoint_id,
                                     owner=owner, run_id=run_id, new_session_id=new_session_id),
                entries.Admission(agents=self.agents, profile=self.recovery, executor_id=launched.own_executor_id,
                                  is_dead=launched.run_is_dead, queued=launched.enqueues),
            )
            if deps is not None:  # in the admitting transaction: the run reads exactly what its start stored
                from ..flow.scopes import store_deps

                store_deps(conn, opened.session_id, opened.run_id, deps)
            if opened.queued:  # the workflow's row in the same transaction: admitted iff queued
                assert launched.enqueuer is not None  # queued: this runtime's entries into that agent enqueue
                launched.enqueuer.enqueue(conn, opened, priority)
            return opened

        opened = self._entry_tx(f"admitting a {entry} entry", admit, lambda conn: entries.opened_run(conn, run_id, launched.enqueues))
        if opened.queued:
            return RunHandle(self, opened.run_id, opened.session_id)
        try:
            handle = admitted_start.start(launched.registry(), launched.engine, self._config.store_retry_window, opened.run_id, opened.session_id)
        except StoreUnavailableError:
            raise  # the store is gone: no release could be written either (see admitted_start.start)
        except Exception as exc:  # release the gate at once rather than leave an orphan for 30 s
            release(launched.engine, self._config.store_retry_window, opened.run_id, f"{type(exc).__name__}: {exc}")
            raise
        return RunHandle(self, opened.run_id, opened.session_id, handle)

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
        check_entry_input(message, None)
        check_priority(priority)
        return self._enter("start", session_id=session_id, agent_name=agent_name, message=message, deps=deps, owner=owner, priority=priority)

    def resume(self, session_id: str, mode: ResumeMode = "continue", message: str | None = None, checkpoint_id: str | None = None, *, priority: int | None = None) -> RunHandle:
        """Recover the saved step (``continue``), redirect it (``with_message``) or rewind to a saved
        append (``from_checkpoint``); ``priority`` as for ``start``."""
        check_session_id(session_id)
        check_entry_input(message, checkpoint_id)
        check_priority(priority)
        kind, message, checkpoint_id = resume_entry(mode, message, checkpoint_id)
        return self._enter(kind, session_id=session_id, message=message, checkpoint_id=checkpoint_id, priority=priority)

    def retry(self, session_id: str, message: str | None = None, checkpoint_id: str | None = None, *, priority: int | None = None) -> RunHandle:
        """After a failed or interrupted run: recover it, or redirect it with ``message`` (at
        ``checkpoint_id`` if given); ``priority`` as for ``start``."""
        check_session_id(session_id)
        check_entry_input(message, checkpoint_id)
        check_priority(priority)
        kind, message, checkpoint_id = retry_entry(message, checkpoint_id)
        return self._enter(kind, session_id=session_id, message=message, checkpoint_id=checkpoint_id, priority=priority)

    # --- answers and stop ----------------------------------------------------------------------

    def _answer(self, request: entries.AnswerRequest, priority: int | None) -> AnswerReceipt:
        """Record ``request`` (its ``at`` minted with it, before the first try: a retry finds its
        answer by it) and, when it was the last one pending, continue the run."""
        sid, did, at = request.session_id, request.dispatch_id, request.at
        check_session_id(sid)
        check_text("dispatch_id", did, 64)
        check_priority(priority)
        assert at is not None
        out = self._entry_tx("recording an answer", lambda conn: entries.answer(conn, request),
                             lambda conn: entries.answered(conn, session_id=sid, dispatch_id=did, at=at))
        run = None
        if out.all_answered and self.auto_continue:
            run = self._enter("resume_continue", session_id=sid, priority=priority)
        return AnswerReceipt(sid, did, out.remaining, run)

    def approve(self, session_id: str, dispatch_id: str, approved: bool = True, reason: str | None = None, actor: str | None = None, *, priority: int | None = None) -> AnswerReceipt:
        """Decide a pending approval; the last answer continues the run (approved bodies then run),
        enqueued with ``priority`` (as for ``start``) where it is enqueued."""
        check_text("reason", reason)
        check_text("actor", actor, 200)
        return self._answer(entries.AnswerRequest(session_id=session_id, dispatch_id=dispatch_id, kind="approval", approved=approved,
                                                  reason=reason, actor=actor, at=now()), priority)

    def submit_tool_result(self, session_id: str, dispatch_id: str, result: Any = None, error: str | None = None, *, priority: int | None = None) -> AnswerReceipt:
        """Settle a pending client-tool call with its result (or its error); ``priority`` as for ``approve``.

        The result is a tool's output, kept exactly as a server tool's is (``ledger/escape.py``): NUL
        and lone surrogates in its strings and keys included. The error is caller text (``check_text``)."""
        check_text("error", error)
        return self._answer(entries.AnswerRequest(session_id=session_id, dispatch_id=dispatch_id, kind="client", result=result,
                                                  error=error, at=now()), priority)

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
        launched = self._ready()
        settled = launched.runner.registry.env.settled if launched.runner is not None else None
        return Reader(launched.engine, store_retry_window=self._config.store_retry_window, settled=settled)

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
        client = self._ready().front_end_client()  # ConfigurationError before launch, as every read
        # imported here: it brings pydantic-ai, which waits for a run that needs it (tests/processes/test_import_cost.py)
        from ..flow import live as live_stream

        return live_stream.read(run_id, timeout, client=client)

    async def live_async(self, run_id: str, timeout: float | None = None) -> AsyncGenerator[LiveValue, None]:
        """``live`` on the caller's event loop."""
        check_text("run_id", run_id)
        client = self._ready().front_end_client()
        from ..flow import live as live_stream

        async for value in live_stream.read_async(run_id, timeout, client=client):
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
    shutdown_async = _async_twin(shutdown)


#: What a ``Runtime`` is configured with (its ``Configured`` attributes): read once by ``launch()``,
#: so fixed from then on (before launch, an operator tool may still repoint it).
CONFIGURATION: frozenset[str] = frozenset(name for name, value in vars(Runtime).items() if isinstance(value, Configured))
