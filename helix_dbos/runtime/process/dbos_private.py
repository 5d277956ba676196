"""The one door to DBOS's private API: every use of ``dbos._*`` and of DBOS's own tables lives here.

helix_dbos needs a few things DBOS does not offer publicly. Each is one function or constant below,
with why the public API does not serve, checked against ``CHECKED_AGAINST`` (the installed dbos,
read in its source). Nothing else in helix_dbos/ or bench/ touches DBOS's private names or tables
(``tests/runtime/test_dbos_private.py`` checks both that and that each of these still has the shape used,
so a DBOS upgrade that moves one fails that test loudly rather than a run quietly).

It is also the one runtime module that writes SQL itself (``tests/unit/test_sql_in_ledger.py`` allows it
by name): DBOS's tables are DBOS's, not the ledger's, so their statements stay beside the rest of
what helix knows about DBOS's insides instead of moving to ``helix_dbos/ledger/``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Final

import sqlalchemy as sa

# Public: ``dbos.error`` is DBOS's exported alias of its ``_error`` module (``dbos.__all__``), so the
# two exceptions the run workflow catches are reached without a private import.
from dbos import DBOS
from dbos import error as _dbos_error

#: The dbos release every use below was read against (``.venv/lib/python3.11/site-packages/dbos``).
CHECKED_AGAINST: Final = "3.4.0"

DBOSWorkflowCancelledError = _dbos_error.DBOSWorkflowCancelledError
DBOSWorkflowConflictIDError = _dbos_error.DBOSWorkflowConflictIDError

#: DBOS's system schema on Postgres (``dbos_system_schema``, default ``dbos``; helix never changes it).
#: On SQLite DBOS's tables live unqualified in the same file as the ledger.
SYSTEM_SCHEMA: Final = "dbos"

#: The columns of DBOS's tables that helix_dbos and bench/ read with plain SQL (the test checks them).
SYSTEM_COLUMNS: Final[Mapping[str, frozenset[str]]] = {
    "workflow_status": frozenset({
        "workflow_uuid", "status", "executor_id", "created_at", "updated_at", "queue_name", "queue_partition_key", "priority",
        "owner_xid", "deduplication_id", "started_at_epoch_ms", "completed_at",
    }),
    "operation_outputs": frozenset({"workflow_uuid", "function_name", "output"}),
    "workflow_input": frozenset({"workflow_uuid", "inputs"}),
}


def _dbos_module() -> Any:
    from dbos import _dbos  # the module holding DBOS's process-wide instance and registry

    return _dbos


# --- the process's DBOS instance --------------------------------------------------------------------


def configured_dbos() -> Any | None:
    """The DBOS instance configured in this process (by the app or a runtime), or None.

    ``dbos._dbos._dbos_global_instance``: ``DBOS(config=...)`` creates the instance if there is none,
    so the public constructor cannot be used to ask whether an app configured DBOS itself (and a
    runtime must then adopt its database rather than configure its own).
    """
    return _dbos_module()._dbos_global_instance


def dbos_config(instance: Any) -> Mapping[str, Any]:
    """The processed configuration of ``instance`` (``DBOS._config``, a ``ConfigFile`` dict).

    DBOS exposes no public read of its configuration; a runtime launched on an app's DBOS reads its
    ``system_database_url`` here so the ledger lives in that database. (The processed config holds
    no ``executor_id``: DBOS keeps that in ``GlobalParams``, public as ``DBOS.executor_id``.)
    """
    config: Mapping[str, Any] = instance._config
    return config


def dbos_launched() -> bool:
    """Whether this process's DBOS instance has been launched (``DBOS._launched``).

    ``DBOS.launch()`` twice only logs a warning, but there is no public "is launched" to tell an app
    that launched DBOS itself apart from one that left launching to the runtime.
    """
    instance = configured_dbos()
    return bool(instance is not None and getattr(instance, "_launched", False))


def system_database_engine() -> sa.Engine:
    """DBOS's own system-database engine (``DBOS._sys_db.engine``), for bench/'s statement counters.

    DBOS offers no public handle on the engine it opens for its system database.
    """
    engine: sa.Engine = _dbos_module()._get_dbos_instance()._sys_db.engine
    return engine


def destroy(wait_seconds: float, *, hurry: threading.Event | None = None, before: Callable[[], None] | None = None, loop_stop: float | None = None) -> None:
    """``DBOS.destroy``, giving workflows in flight up to ``wait_seconds`` to end, without DBOS's
    own minimum of a second.

    ``DBOS._destroy`` with a completion timeout sleeps a whole second before it first looks at its
    active workflows, so every shutdown cost at least a second (a CLI command, a script, a test's
    runtime), most often with nothing in flight. Here the same steps run in the same order (stop
    the background threads, so no queue starts another workflow; wait for the active set,
    ``_active_workflows_set``, to empty), looking every 20 ms, and DBOS then destroys with no wait.

    ``hurry`` (set: a second Ctrl-C) cuts the wait short. Whatever ends the wait, also an exception
    raised into it, ``before`` runs and DBOS is destroyed: its cancellation of the workflows' tasks
    is what leaves them ``PENDING`` for the next launch, where a process left to exit with them
    still running would record them ``ERROR``.

    ``loop_stop``: seconds DBOS's background event loop gets to stop, in place of DBOS's fixed 10 s
    (``BackgroundEventLoop.stop``). A body that blocks the loop itself (a sync wait inside an
    ``async def``) keeps it from ever stopping, and a worker's drain then took its timeout plus 10 s
    to exit; the loop's thread is a daemon, and a workflow it still runs is left ``PENDING``.
    """
    import time

    instance = configured_dbos()
    try:
        if instance is not None and wait_seconds > 0:
            for event in getattr(instance, "background_thread_stop_events", ()):
                event.set()
            active = getattr(instance, "_active_workflows_set", None)
            deadline = time.monotonic() + wait_seconds
            while active is not None and active.activeList() and time.monotonic() < deadline and not (hurry and hurry.is_set()):
                time.sleep(0.02)
    finally:
        if before is not None:
            before()
        loop = getattr(instance, "_background_event_loop", None) if instance is not None else None
        if loop is not None and loop_stop is not None:
            loop.stop(timeout=loop_stop)  # DBOS's own stop() below then finds it stopped
        DBOS.destroy(destroy_registry=True, workflow_completion_timeout_sec=0)


def stop_background() -> None:
    """Stop DBOS's background threads, the queue thread first among them: no queue (the run
    queues, the internal recovery queue) starts another workflow in this process. What is in flight
    goes on. DBOS stops them only inside ``destroy``; a drain needs it without destroying."""
    instance = configured_dbos()
    for event in getattr(instance, "background_thread_stop_events", ()) if instance is not None else ():
        event.set()


def active_workflow_ids() -> list[str]:
    """The workflows this process is executing now (DBOS's ``_active_workflows_set``)."""
    instance = configured_dbos()
    active = getattr(instance, "_active_workflows_set", None) if instance is not None else None
    return [str(w) for w in active.activeList()] if active is not None else []


def wait_active(wait_seconds: float, hurry: threading.Event | None = None) -> list[str]:
    """Stop dequeuing, then wait up to ``wait_seconds`` (looking every 20 ms) for the workflows in
    flight here to end, or until ``hurry`` is set (a second signal); the ids still in flight."""
    import time

    stop_background()
    deadline = time.monotonic() + wait_seconds
    while (left := active_workflow_ids()) and time.monotonic() < deadline and not (hurry and hurry.is_set()):
        time.sleep(0.02)
    return left


def run_client_migrations(client: Any) -> None:
    """Create or upgrade DBOS's system tables from a ``DBOSClient`` (``_sys_db.run_migrations``):
    a front end may be the first process on a fresh database, and the client never migrates."""
    client._sys_db.run_migrations()


def workflow_row(conn: sa.Connection, workflow_id: str) -> tuple[str, str | None] | None:
    """DBOS's (status, executor id) of a workflow, read on the caller's connection; None if no row
    (what ``DBOS.get_workflow_status`` says, without a launched DBOS: a front end has none)."""
    sql = f"SELECT status, executor_id FROM {_table(conn, 'workflow_status')} WHERE workflow_uuid = :id"
    row = conn.execute(sa.text(sql), {"id": workflow_id}).first()
    return None if row is None else (str(row[0]), None if row[1] is None else str(row[1]))


def queue_position(conn: sa.Connection, workflow_id: str) -> int | None:
    """How many workflows of its queue partition DBOS will dequeue before this one (0: next), as
    DBOS orders a partition (priority, then enqueue time); None unless it waits ``ENQUEUED``.

    DBOS's enqueue time is in whole seconds on SQLite, so runs enqueued in one second are ordered
    by the ledger's admission time (microseconds), then by id."""
    from ...ledger import tables as t

    sqlite = conn.dialect.name == "sqlite"
    ws = sa.table(
        "workflow_status",
        *(sa.column(c) for c in ("workflow_uuid", "status", "queue_name", "queue_partition_key", "priority", "created_at")),
        schema=None if sqlite else SYSTEM_SCHEMA,
    )
    me = conn.execute(
        sa.select(ws.c.queue_name, ws.c.queue_partition_key, ws.c.priority, ws.c.created_at, t.runs.c.created_at.label("admitted"))
        .select_from(ws.outerjoin(t.runs, t.runs.c.run_id == ws.c.workflow_uuid))
        .where(ws.c.workflow_uuid == workflow_id, ws.c.status == "ENQUEUED")
    ).first()
    if me is None or me.queue_name is None:
        return None
    same_time = sa.and_(ws.c.priority == me.priority, ws.c.created_at == me.created_at)
    earlier = sa.or_(
        ws.c.priority < me.priority,
        sa.and_(ws.c.priority == me.priority, ws.c.created_at < me.created_at),
        sa.and_(same_time, t.runs.c.created_at < me.admitted) if me.admitted is not None else sa.false(),
        sa.and_(same_time, t.runs.c.created_at == me.admitted, ws.c.workflow_uuid < workflow_id) if me.admitted is not None else sa.false(),
    )
    ahead = conn.execute(
        sa.select(sa.func.count())
        .select_from(ws.outerjoin(t.runs, t.runs.c.run_id == ws.c.workflow_uuid))
        .where(
            ws.c.queue_name == me.queue_name,
            ws.c.status == "ENQUEUED",
            sa.func.coalesce(ws.c.queue_partition_key, "") == (me.queue_partition_key or ""),
            earlier,
        )
    ).scalar()
    return int(ahead or 0)


# --- DBOS's registry of workflows and internal queues ------------------------------------------------


def registered_workflow(name: str) -> Callable[..., Any] | None:
    """The function registered under workflow name ``name`` in DBOS's registry, or None.

    ``_get_or_create_dbos_registry().workflow_info_map``: DBOS resolves a workflow by this name on
    recovery, and offers no public lookup of what is registered.
    """
    found: Callable[..., Any] | None = _dbos_module()._get_or_create_dbos_registry().workflow_info_map.get(name)
    return found


def set_internal_queue_polling(seconds: float) -> None:
    """Poll DBOS's internal queue every ``seconds`` (its default is 1 s).

    Recovery re-enqueues pending workflows on the internal queue (``dbos._utils.INTERNAL_QUEUE_NAME``),
    made on first use by ``DBOSRegistry._register_internal_queue``; ``DBOSConfig`` has no setting for
    its interval (only Kafka's internal queues have one). The queue is in memory and its worker
    re-reads ``_polling_interval_sec`` before every wait, so a longer interval applies at the next
    poll (a shorter one only decays in, by 10% a poll: DBOS's contention back-off).
    """
    from dbos._utils import INTERNAL_QUEUE_NAME

    queue = _dbos_module()._get_or_create_dbos_registry()._register_internal_queue(INTERNAL_QUEUE_NAME, polling_interval_sec=seconds)
    queue._polling_interval_sec = seconds


def workflow_future(handle: Any) -> Future[Any] | None:
    """The in-process future of a workflow this process started, or None (a polling handle).

    ``WorkflowHandleFuture.future``: ``DBOS.start_workflow`` runs the workflow in this process and
    its handle holds the ``concurrent.futures.Future`` it resolves; the public ``get_result`` would
    re-raise the workflow's error and record a ``getResult`` operation when called in a workflow, and
    a caller that only wants to know *when* it ended needs neither.
    """
    future = getattr(handle, "future", None)
    return future if isinstance(future, Future) else None


# --- recovery of another executor's workflows --------------------------------------------------------


def recover_pending_workflows(executor_id: str) -> list[str]:
    """Hand ``executor_id``'s PENDING workflows to DBOS's recovery; their workflow ids.

    ``DBOS._recover_pending_workflows``: DBOS recovers only the launching process's own executor id
    publicly (at launch); taking over a gone executor's workflows (``recover_executor``, takeovers)
    has no public call.
    """
    handles = DBOS._recover_pending_workflows([executor_id])
    return [h.get_workflow_id() for h in handles]


# --- DBOS's tables, read in the caller's transaction ---------------------------------------------------


def system_table(name: str, *, sqlite: bool) -> str:
    """The qualified name of DBOS's system table ``name`` (one of ``SYSTEM_COLUMNS``)."""
    if name not in SYSTEM_COLUMNS:
        raise KeyError(f"{name!r} is not a DBOS table helix_dbos reads")
    return name if sqlite else f"{SYSTEM_SCHEMA}.{name}"


def _table(conn: sa.Connection, name: str) -> str:
    return system_table(name, sqlite=conn.dialect.name == "sqlite")


def workflow_status(conn: sa.Connection, workflow_id: str) -> str | None:
    """DBOS's status of a workflow, read in the caller's ledger transaction (one database); None if no row.

    Plain SQL on ``workflow_status`` rather than ``DBOS.get_workflow_status``: that call is itself a
    recorded operation, so it cannot run inside a step or a datasource transaction, and it reads on
    DBOS's own connection, not in the ledger transaction deciding on the answer.
    """
    sql = f"SELECT status FROM {_table(conn, 'workflow_status')} WHERE workflow_uuid = :id"
    value = conn.execute(sa.text(sql), {"id": workflow_id}).scalar()
    return None if value is None else str(value)


def withdraw_enqueued(conn: sa.Connection, workflow_id: str) -> bool:
    """Take a workflow that still waits ``ENQUEUED`` off its queue, in the caller's transaction:
    whether it did (False: a worker dequeued it first, or it is no queued workflow).

    The same row DBOS's ``cancel_workflows`` writes (``CANCELLED``, off its queue, no deduplication
    id, ``completed_at`` now), but only from ``ENQUEUED`` and on the caller's connection: DBOS's own
    cancel commits in a transaction of its own and would cancel a dequeued run as well, while a stop
    must withdraw a run exactly when it records the stop. A dequeue flips the row to ``PENDING``
    under its row lock, so of the two, one wins (Postgres re-reads the row after the lock; SQLite
    has one writer).
    """
    return _cancel_on(conn, workflow_id, ("ENQUEUED",), among=True)


def cancel_unfinished(conn: sa.Connection, workflow_id: str) -> bool:
    """DBOS's ``cancel_workflows`` of one workflow (any status but ``SUCCESS``/``ERROR``), written in
    the caller's transaction: whether a row changed.

    Why not DBOS's own call: it commits on DBOS's connection, and the caller decides inside a ledger
    transaction that holds its session's lock. On SQLite that lock is the database's one write lock,
    so DBOS's write would wait for the very transaction that waits for it (a self-deadlock until the
    busy timeout); on both databases the cancel and the ledger's decision now commit together.
    """
    return _cancel_on(conn, workflow_id, ("SUCCESS", "ERROR"), among=False)


def _cancel_on(conn: sa.Connection, workflow_id: str, statuses: tuple[str, ...], *, among: bool) -> bool:
    sqlite = conn.dialect.name == "sqlite"
    ws = sa.table(
        "workflow_status",
        *(sa.column(c) for c in ("workflow_uuid", "status", "queue_name", "owner_xid", "deduplication_id", "started_at_epoch_ms", "updated_at", "completed_at")),
        schema=None if sqlite else SYSTEM_SCHEMA,
    )
    # DBOS's ``_now_ms_sql``: epoch milliseconds on the database clock
    now_ms = sa.cast(sa.func.strftime("%s", "now") * 1000, sa.BigInteger) if sqlite else sa.cast(sa.func.extract("epoch", sa.func.now()) * 1000, sa.BigInteger)
    which = ws.c.status.in_(statuses) if among else ws.c.status.not_in(statuses)
    done = conn.execute(
        ws.update()
        .where(ws.c.workflow_uuid == workflow_id, which)
        .values(status="CANCELLED", owner_xid=None, queue_name=None, deduplication_id=None, started_at_epoch_ms=None, updated_at=now_ms, completed_at=now_ms)
    )
    return done.rowcount == 1


def cancelled_among(conn: sa.Connection, workflow_ids: list[str]) -> list[str]:
    """Those of ``workflow_ids`` DBOS says are ``CANCELLED`` (plain SQL, for ``workflow_status``'s reason)."""
    found: list[str] = []
    for i in range(0, len(workflow_ids), 500):  # bounded statements, however long the queue
        chunk = workflow_ids[i : i + 500]
        sql = sa.text(f"SELECT workflow_uuid FROM {_table(conn, 'workflow_status')} WHERE status = 'CANCELLED' AND workflow_uuid IN :ids")
        found += [str(v) for v in conn.execute(sql.bindparams(sa.bindparam("ids", expanding=True)), {"ids": chunk}).scalars()]
    return found


def workflow_status_of(workflow_id: Any, *, sqlite: bool) -> Any:
    """DBOS's status of a workflow as a scalar subquery, for the run fence's one statement.

    Plain SQL on ``workflow_status`` for the reason of ``workflow_status``; the run fence reads it in
    the same statement as the run and its session, so a cancel costs no extra round trip to notice.
    """
    table = sa.table("workflow_status", sa.column("workflow_uuid"), sa.column("status"), schema=None if sqlite else SYSTEM_SCHEMA)
    return sa.select(table.c.status).where(table.c.workflow_uuid == workflow_id).scalar_subquery()


def pending_workflow_count(conn: sa.Connection, executor_id: str) -> int:
    """How many PENDING workflows DBOS holds for ``executor_id`` (what a takeover would recover).

    Plain SQL for the reasons of ``workflow_status``, and because operator commands (``executors``)
    ask without a launched DBOS, which ``DBOS.list_workflows`` needs.
    """
    sql = f"SELECT COUNT(*) FROM {_table(conn, 'workflow_status')} WHERE executor_id = :e AND status = 'PENDING'"
    return int(conn.execute(sa.text(sql), {"e": executor_id}).scalar() or 0)


def internal_queue_backlog(conn: sa.Connection, executor_id: str) -> int:
    """What a launch of ``executor_id`` will hand its internal queue: its PENDING workflows (DBOS's
    recovery re-enqueues them there) and what is already ENQUEUED there (an operator's ``dbos
    workflow resume`` while no process ran). 0 before DBOS has made its tables (a new database).

    Plain SQL for the reasons of ``workflow_status``: this is asked before ``DBOS.launch``.
    """
    from dbos._utils import INTERNAL_QUEUE_NAME

    sql = (
        f"SELECT COUNT(*) FROM {_table(conn, 'workflow_status')} "
        "WHERE (executor_id = :e AND status = 'PENDING') OR (status = 'ENQUEUED' AND queue_name = :q)"
    )
    try:
        return int(conn.execute(sa.text(sql), {"e": executor_id, "q": INTERNAL_QUEUE_NAME}).scalar() or 0)
    except sa.exc.DBAPIError:
        return 0


def background_workflow_loop() -> asyncio.AbstractEventLoop | None:
    """The loop DBOS runs async workflows on when it is DBOS's own background loop, else None
    (``DBOS._background_event_loop``: ``target_loop()`` and ``_loop``).

    DBOS offers no public handle on it. That loop runs with ``run_forever``, so it has no task
    ``run_until_complete`` runs, which anyio takes as a loop's root (``process/anyio_root.py``); a
    loop DBOS adopted (an app that launched DBOS inside its own running loop) has its own root.
    """
    background = _dbos_module()._get_dbos_instance()._background_event_loop
    loop: asyncio.AbstractEventLoop | None = background.target_loop()
    return loop if loop is not None and loop is background._loop and loop.is_running() else None


__all__ = [
    "CHECKED_AGAINST",
    "SYSTEM_COLUMNS",
    "SYSTEM_SCHEMA",
    "DBOSWorkflowCancelledError",
    "DBOSWorkflowConflictIDError",
    "active_workflow_ids",
    "background_workflow_loop",
    "cancel_unfinished",
    "cancelled_among",
    "configured_dbos",
    "dbos_config",
    "dbos_launched",
    "destroy",
    "internal_queue_backlog",
    "pending_workflow_count",
    "queue_position",
    "recover_pending_workflows",
    "registered_workflow",
    "run_client_migrations",
    "set_internal_queue_polling",
    "stop_background",
    "system_database_engine",
    "system_table",
    "wait_active",
    "withdraw_enqueued",
    "workflow_future",
    "workflow_row",
    "workflow_status",
    "workflow_status_of",
]

