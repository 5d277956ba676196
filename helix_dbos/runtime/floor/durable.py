"""The durable operations every part of a run stands on: ledger transactions and DBOS steps.

- ``tx``: an exactly-once ledger transaction of a workflow, its output recorded with its work
  (prepare, append, step commits, ends, the delegating gates);
- ``plain_tx``: a short, idempotent ledger transaction (a call's attempt gate and result write,
  reads), retried through a store outage for ``store_retry_window``;
- ``tx_and_read``: ``tx``, with a read in the same transaction handed over in memory (``handoff.py``);
- ``record_reply`` / ``replayed_reply``: a model request's outcome, recorded once as the ledger's
  ``helix.reply#k`` and read back by a replay;
- ``step``: a DBOS step whose recorded output a replay sees (the model request with live output, a
  child's wait);
- ``workflow_function``: what every workflow function is wrapped in (its operation counter, and
  staying ``PENDING`` when the process stops).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, TypeVar, TypeVarTuple, cast

import sqlalchemy as sa
from dbos import DBOS, StepOptions

from ...ledger import tx_outputs
from ...ledger.escape import escape_json, unescape_json
from ...ledger.names import REPLY_TX
from ..process import dbos_private, trace_export
from . import codec
from .records import RecordedReply, ReplyRecord
from .registry import serving, serving_registry
from .store_retry import retrying

if TYPE_CHECKING:
    from .registry import Registry

#: DBOS statuses after which a workflow will never write again: its ledger outcome is final or lost.
DBOS_TERMINAL: Final = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})

#: The running workflow execution's count of ledger transactions by name (see ``tx``).
_ops: ContextVar[Counter[str] | None] = ContextVar("helix_workflow_ops", default=None)
_REPLAYING = "\0replaying"
log = logging.getLogger("helix_dbos")

T = TypeVar("T")
R = TypeVar("R")
Ts = TypeVarTuple("Ts")
#: One kind of recorded model reply, handed back as it was given.
Rec = TypeVar("Rec", bound=ReplyRecord)


class ProcessStopping(BaseException):
    """The process stopped executing this workflow mid-way (Ctrl-C, SIGTERM, ``runtime.shutdown()``).

    ``DBOS.destroy`` cancels every task on its event loop; a cancelled workflow task surfaces in
    DBOS's workflow thread as ``concurrent.futures.CancelledError``, an ``Exception``, which DBOS
    records as the workflow's ``ERROR`` outcome, and DBOS never recovers an ``ERROR`` workflow: the
    ledger run would stay ``running`` for ever. Raised instead, this ``BaseException`` gets past
    DBOS's ``except Exception``, so no outcome is recorded, the workflow stays ``PENDING`` and this
    executor id's next launch recovers it by the recovery rules, like after a crash.
    """


#: What ``asyncio.to_thread`` raises once the interpreter is exiting (its executors refuse work,
#: Python 3.11) or may no longer start threads (3.12+).
_EXITING: Final = ("cannot schedule new futures", "can't create new thread at interpreter shutdown")


async def off_loop(fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """``asyncio.to_thread(fn, *args)`` for a workflow's own ledger work, which a stopping process
    never does: ``ProcessStopping`` instead, so DBOS records nothing and the workflow stays ``PENDING``.

    Stopping means ``Runtime.shutdown`` is past its grace period (``Registry.stopping`` of the
    registry this workflow was entered with, also set once it is uninstalled), or the interpreter is exiting with the workflow still running
    (a second Ctrl-C cut the shutdown short, or a script never called it): its executors then refuse
    new work with a ``RuntimeError``, which the run would have recorded as its failure (and DBOS as
    ``ERROR``, which it never recovers) while the ledger stayed ``running``.
    """
    if serving_registry().stopping:
        raise ProcessStopping("the process is stopping: the workflow's next ledger operation is left to the next launch")
    try:
        return await asyncio.to_thread(fn, *args)
    except RuntimeError as exc:
        if any(m in str(exc) for m in _EXITING):
            raise ProcessStopping(f"the interpreter is exiting ({exc}); the next launch with this executor id recovers the workflow") from exc
        raise


def keep_pending_on_shutdown(fn: Callable[..., Coroutine[Any, Any, Any]], registry: Registry) -> Callable[..., Coroutine[Any, Any, Any]]:
    """Wrap a workflow function of ``registry`` so a stopping event loop leaves it ``PENDING`` (see ``ProcessStopping``)."""

    @functools.wraps(fn)
    async def workflow(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except asyncio.CancelledError as exc:  # only a stopping event loop cancels a workflow's task
            # Nothing here may raise an Exception: DBOS would record it as the workflow's ERROR.
            try:
                what = f"workflow {DBOS.workflow_id} (executor {registry.env.settings.executor_id})"
            except Exception:  # noqa: BLE001 (outside a workflow context: only the log line's words change)
                what = "a workflow"
            log.warning("%s interrupted by the process stopping; the next launch with that executor id recovers it", what)
            raise ProcessStopping(f"{what} was interrupted by the process stopping") from exc

    return workflow


async def replayed_reply() -> RecordedReply | None:
    """The model reply this point of the workflow recorded before, when replaying; else None.

    A model reply is not a DBOS step (whose lookup and record were two transactions): it is the
    ledger's ``helix.reply#k`` record, written in one transaction right after the request: its
    reply, the failure it raised or the stop it read instead (``record_reply``). A replay looks the
    ``k``-th one up before asking the model, and a reply found here is consumed (the next lookup is
    ``k + 1``); a fresh execution (past its first new transaction) asks without looking.
    """
    ops = _ops.get()
    if ops is None or not ops[_REPLAYING]:
        return None
    workflow_id, op = DBOS.workflow_id, f"{REPLY_TX}#{ops[REPLY_TX]}"

    engine = serving_registry().env.tx_engine

    def look() -> RecordedReply | None:
        with engine.connect() as conn:
            done = tx_outputs.recorded(conn, workflow_id, op)
        return None if done is None else cast(RecordedReply, codec.decode(ReplyRecord, done[0]))

    found = await retrying("reading a recorded model reply", lambda: off_loop(look), math.inf, _try_bound())
    if found is not None:
        ops[REPLY_TX] += 1
    return found


def _the_reply(conn: sa.Connection, reply: ReplyRecord) -> ReplyRecord:
    return reply


async def record_reply(reply: Rec) -> Rec:
    """Record a model request's outcome, exactly once, before anything acts on it (the ``after_model`` boundary)."""
    return cast(Rec, await tx(REPLY_TX, _the_reply, reply, read_as=ReplyRecord))


async def tx_with_reply(
    reply: ReplyRecord, name: str, fn: Callable[[sa.Connection, *Ts], T], *args: *Ts, recorded_as: Callable[[T], object] | None = None
) -> T:
    """``record_reply(reply)`` and ``tx(name, fn, *args)`` in one database transaction.

    For a reply whose first consequence is that transaction (the append checkpoint of a step that
    starts a body): nothing acts on the reply before both commit, so the record still comes before
    anything acts on it, and a crash after the commit never asks the model again; a crash before it
    asks again, as a crash before a separate record did. The reply keeps its own record
    (``helix.reply#k``, what ``replayed_reply`` looks up), written by ``name``'s transaction: one
    commit (one WAL flush) per such step instead of two. A replay that finds ``name``'s record
    finds the reply's too (one transaction wrote both); a concurrent execution that committed first
    makes this one roll both back and return its output, as ``tx`` does."""
    workflow_id = DBOS.workflow_id
    ops = _ops.get()
    if workflow_id is None or ops is None:
        raise RuntimeError(f"{name}: ledger transactions need a workflow and its operation counter")
    op = f"{REPLY_TX}#{ops[REPLY_TX]}"
    ops[REPLY_TX] += 1
    return await tx(name, fn, *args, recorded_as=recorded_as, beside=(op, codec.encode(reply)))


async def tx(
    name: str, fn: Callable[[sa.Connection, *Ts], T], *args: *Ts, read_as: type[T] | None = None, recorded_as: Callable[[T], object] | None = None,
    beside: tuple[str, object] | None = None,
) -> T:
    """An exactly-once ledger transaction of the workflow: its output commits with its work, in one
    database transaction, and a replay of the workflow returns that output instead of writing again.

    The record is the ledger's own ``tx_outputs`` row, keyed by the workflow id and the operation
    (``name`` and how many times this workflow execution ran ``name`` before: workflow code runs its
    transactions in a fixed order, as DBOS runs its steps). A second, concurrent execution of the same
    workflow fails on the key, rolls its work back and returns the first one's output. DBOS's own
    datasource transaction did the same at five database transactions each; this is one.

    It runs the blocking engine in a worker thread, so a transaction is one tight unit of work: on
    SQLite the write lock is never held across event-loop turns. In an outage it is re-run until the
    store answers, with no deadline (a lost commit acknowledgement finds its record and returns it).

    The record is JSON (the ledger's ``Json`` column), written and read back through ``codec``:
    what ``fn`` returns is a record of ``runtime/floor/records.py`` (a frozen dataclass, its type
    given as ``read_as`` so a replay decodes it), or a row (a ``TypedDict`` of ``records.py`` or
    ``ledger/records.py``, a list of them, a string), which a replay hands back with the same keys
    (a tuple would come back a list).

    ``recorded_as``: what of the output is recorded, when part of it is rows the transaction wrote
    anyway (the append's calls): this execution gets the whole output, a replay the recorded part,
    and the caller reads the rest back from the ledger.

    ``beside``: another operation's record (its op and encoded output) committed with this one, in
    the same statement (``tx_with_reply``'s reply).
    """
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None, "ledger transactions run in a workflow"
    ops = _ops.get()
    if ops is None:  # a workflow function not wrapped by ``workflow_function`` (never in helix_dbos)
        raise RuntimeError(f"{name}: ledger transactions need the workflow's operation counter")
    op = f"{name}#{ops[name]}"
    ops[name] += 1
    engine = serving_registry().env.tx_engine
    fresh: list[bool] = []

    def replayed(recorded: object) -> T:
        return cast(T, recorded) if read_as is None else codec.decode(read_as, recorded)

    def once() -> T:
        try:
            with engine.begin() as conn:
                if ops[_REPLAYING]:
                    done = tx_outputs.recorded(conn, workflow_id, op)
                    if done is not None:
                        return replayed(done[0])
                out = fn(conn, *args)
                mine = (op, _encoded(name, out if recorded_as is None else recorded_as(out), read_as))
                tx_outputs.record(conn, workflow_id, *([beside] if beside is not None else []), mine)
        except sa.exc.IntegrityError:
            # another execution of this workflow committed this operation first: its output is the answer
            with engine.connect() as conn:
                done = tx_outputs.recorded(conn, workflow_id, op)
            if done is None:
                raise
            return replayed(done[0])
        # Operations commit in workflow order, so once one is new to the record every later one is too.
        ops[_REPLAYING] = 0
        fresh.append(True)
        return out

    out = await retrying(f"running {name}", lambda: off_loop(once), math.inf, _try_bound())
    if fresh:  # committed now (not replayed): its span, and every span before it, leave before a kill can lose them
        await trace_export.flushed()
    return out


def _encoded(name: str, out: object, read_as: type[Any] | None) -> object:
    """``out`` as ``tx`` records it; a record whose type the replay would not be told is a bug here."""
    encoded = codec.encode(out)
    if encoded is not out and read_as is None:
        raise TypeError(f"{name} returns a {type(out).__name__}: its tx must say read_as=, or a replay would hand back a dict")
    return encoded


async def tx_and_read(
    name: str, fn: Callable[[sa.Connection, *Ts], T], read: Callable[[sa.Connection, T], R], *args: *Ts, read_as: type[T] | None = None
) -> tuple[T, R | None]:
    """``tx``, and ``read(conn, output)`` in the same transaction after its work: the output is
    recorded, the read is only handed back (``runtime/floor/handoff.py``), and None unless this execution
    committed the transaction fresh (a replay or another execution's record returns the recorded
    output without running ``fn``, so nothing was read with it)."""
    ran: list[tuple[T, R]] = []  # (output, read) of the last time ``fn`` ran in this execution

    def work(conn: sa.Connection, *a: *Ts) -> T:
        out = fn(conn, *a)
        ran[:] = [(out, read(conn, out))]
        return out

    out = await tx(name, work, *args, read_as=read_as)
    return out, next((r for o, r in ran if o is out), None)


def tx_committed(conn: sa.Connection, workflow_id: str, name: str) -> bool:
    """Whether the workflow's first ``tx`` called ``name`` has committed (a replay is past it)."""
    return tx_outputs.exists(conn, workflow_id, f"{name}#0")


def workflow_function(fn: Callable[..., Coroutine[Any, Any, Any]], registry: Registry) -> Callable[..., Coroutine[Any, Any, Any]]:
    """Wrap a workflow function: its own operation counter for ``tx``, the registry its durable
    operations run against (``registry.serving``: set here, the workflow's entry, as DBOS calls it
    with its input only), and a stopping event loop leaves it ``PENDING`` (see ``ProcessStopping``).

    Each execution starts out replaying: its transactions look their record up until the first one
    that finds none (a recovered or resumed workflow returns what it committed before; a fresh one
    pays one lookup, in its first transaction).
    """
    inner = keep_pending_on_shutdown(fn, registry)

    @functools.wraps(fn)
    async def workflow(*args: Any, **kwargs: Any) -> Any:
        ops: Counter[str] = Counter({_REPLAYING: 1})
        _ops.set(ops)
        with serving(registry):
            return await inner(*args, **kwargs)

    return workflow


def _short_tx(engine: sa.Engine, fn: Callable[[sa.Connection, *Ts], T], *args: *Ts) -> T:
    with engine.begin() as conn:
        return fn(conn, *args)


def _try_bound() -> float:
    """How long one try of a transaction retried without a deadline may wait on the server."""
    return serving_registry().env.settings.store_retry_window


async def plain_tx(fn: Callable[[sa.Connection, *Ts], T], *args: *Ts) -> T:
    """A short ledger transaction in a worker thread with no once-only record of its own (``tx``
    keeps one): the attempt gate, a result write, a read, each of which answers from the ledger
    when a replay runs it again.

    Transient store errors re-run the whole transaction for up to ``store_retry_window`` seconds,
    then raise ``StoreUnavailableError``. A commit whose acknowledgement was lost may have committed,
    so ``fn`` must be idempotent across such a retry: the writers passed here are (the attempt gate
    by its token in ``bodies.py``, the result write by its attempt fence).
    """
    registry = serving_registry()
    window = registry.env.settings.store_retry_window
    engine = registry.env.tx_engine
    return await retrying(f"running {getattr(fn, '__name__', 'a ledger transaction')}", lambda: off_loop(_short_tx, engine, fn, *args), window, window)


class Tries:
    """How many times one ``plain_tx`` (or ``group_commit.write``) has run its transaction function.

    Made by the caller and passed as one of the function's arguments, so every try sees the same
    count: a try after the first may follow a commit whose acknowledgement was lost, and looks for
    its own earlier write (the attempt gate by its token, the result write by its answer), which
    the first try, the only one almost every write makes, never has to."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def begin(self) -> bool:
        """Count the try that begins now; True when one ran before it (its write may have committed)."""
        self.count += 1
        return self.count > 1


def recorded(value: Any) -> Any:
    """A value as DBOS may record it: every string through the ledger's escape (``ledger/escape.py``).

    DBOS writes its JSON with non-ASCII characters raw, and a lone surrogate in a model reply or a
    tool's text cannot be encoded for either database, so the output of the step that holds it was
    never recorded and the run failed after the model was paid. Outputs are escaped for DBOS and
    unescaped when DBOS hands them back, fresh or replayed, so workflow code sees the original.
    """
    return escape_json(value)


async def step(options: StepOptions, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts, read_as: type[Any] | None = None) -> T:
    """A DBOS step (at-least-once; its recorded output is what a replay sees), recorded escaped.
    ``options`` are DBOS's own, ``name`` among them. An output that is a record of ``records.py``
    (the model reply with live output) goes out through ``codec`` and comes back as a ``read_as``,
    fresh or replayed; anything else is recorded as it is (``codec.encode`` leaves it so)."""

    async def body(*a: Any) -> Any:
        return recorded(_encoded(str(options.get("name")), await fn(*a), read_as))

    out = unescape_json(await DBOS.run_step_async(options, body, *args))  # as ``fn`` returned it
    return cast(T, out if read_as is None else codec.decode(read_as, out))


#: Kept for ``workflow.py``'s cancel settling; new callers use ``dbos_private.workflow_status``.
dbos_status = dbos_private.workflow_status


def poll_interval(registry: Registry) -> float:
    """How often a waiting parent re-reads the ledger: SQLite polls anyway, Postgres round trips are cheap."""
    return 0.05 if registry.env.settings.sqlite else 0.1
