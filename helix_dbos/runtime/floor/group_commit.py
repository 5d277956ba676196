"""Group commit: the attempt gates (and the result writes) of one run's concurrent calls share a transaction.

A step's parallel calls reach their gates together, and their trivial bodies end together. Each
gate and each result write locks the session's row (the fence, and the session's event counter),
so as separate transactions they queue behind each other's round trips and commits: on Postgres a
step with three calls spent most of its time waiting on that lock, not writing. Here a write that
finds its run's queue idle waits one event-loop turn for the siblings woken in the same turn, then
commits them all in one transaction; writes that arrive while it is in flight form the next one.
The group's events are appended at its end, numbered in the order its writes emitted them: the
session's row is locked by the first write's fence and bumped once (``events.one_bump``).

What each write means does not change: every gate still decides its own call under the same fence
inside the transaction, every result is still fenced by its attempt, and no body starts before its
own attempt has committed (a batch's attempts commit together, before any of its bodies run). A
crash loses what it lost before: writes not yet committed, never a committed one. One write that
raises rolls its batch back; each of the batch's writes is then run on its own (each is idempotent,
as ``plain_tx`` requires), so a refused or failing write answers only for itself. A write whose task
is cancelled before its batch starts is dropped from it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar, TypeVarTuple

import sqlalchemy as sa

from ...errors import StoreUnavailableError
from ...ledger import events
from . import step_memo
from .durable import plain_tx
from .registry import Registry
from .write_queue import GroupKey, GroupQueue, PendingWrite, Raised, Wrote

log = logging.getLogger("helix_dbos")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
#: A write's outcome as its group's commit hands it out (the group's writes return different types).
_Outcome = Wrote[Any] | Raised


def _all(conn: sa.Connection, writes: list[PendingWrite[Any]]) -> list[Any]:
    """The group's writes in order; their events appended together at the end, one bump of the
    session's counter for the group (``events.one_bump``) instead of one per write, and one read of
    a step's calls for its gates (``step_memo``) instead of one per gate."""
    with events.one_bump(conn), step_memo.shared(conn):
        return [w.work(conn) for w in writes]


_all.__name__ = "a group of ledger writes"


def _bound(fn: Callable[[sa.Connection, *Ts], T], args: tuple[*Ts]) -> Callable[[sa.Connection], T]:
    """``fn`` bound to its arguments, named as ``fn`` (what a retried ``plain_tx`` logs)."""

    def work(conn: sa.Connection) -> T:
        return fn(conn, *args)

    work.__name__ = getattr(fn, "__name__", "a ledger write")
    return work


async def write(registry: Registry, run_id: str, workflow_id: str | None, fn: Callable[[sa.Connection, *Ts], T], *args: *Ts) -> T:
    """``plain_tx(fn, *args)``, sharing its transaction with the run's writes issued in the same
    event-loop turn (or while the run's previous group was in flight). The queues are
    ``registry``'s (the launch running the run), never a module's."""
    loop = asyncio.get_running_loop()
    key = (id(loop), workflow_id, run_id)
    queues = registry.group_queues
    queue = queues.setdefault(key, GroupQueue())
    mine: PendingWrite[T] = PendingWrite(_bound(fn, args), loop.create_future())
    queue.waiting.append(mine)
    if queue.busy:
        try:
            await mine.future
        except asyncio.CancelledError:
            if mine.future.done() and not mine.future.cancelled() and mine.outcome is None:  # its turn came as it was cancelled
                queue.waiting = [w for w in queue.waiting if w is not mine]
                _hand_over(queues, key, queue)
            raise
        if mine.outcome is not None:  # its group ran under another write's task
            return mine.outcome.unwrap()
    else:
        queue.busy = True
    group: list[PendingWrite[Any]] = []
    try:
        if len(queue.waiting) == 1:
            await asyncio.sleep(0)  # the siblings woken in this turn join
        group = [w for w in queue.waiting if w is mine or not w.future.done()]
        queue.waiting = []
        commit = asyncio.ensure_future(_commit(group))
        try:
            outcomes = await asyncio.shield(commit)
        except asyncio.CancelledError:
            # The runner's own task was cancelled; its siblings' writes are still in flight and
            # each of them learns its own outcome when the transaction ends, never a cancellation.
            commit.add_done_callback(lambda done: _deliver(group, mine, done))
            raise
    except BaseException as exc:  # a stopping process (ProcessStopping): the others learn it too
        for w in group:
            if w is not mine and not w.future.done() and not isinstance(exc, asyncio.CancelledError):
                w.future.set_exception(exc)
        raise
    finally:
        queue.waiting = [w for w in queue.waiting if w is not mine]  # cancelled before its group formed
        _hand_over(queues, key, queue)
    _deliver_outcomes(group, mine, outcomes)
    if mine.outcome is None:
        raise RuntimeError("group commit lost its own write")
    return mine.outcome.unwrap()


def _deliver_outcomes(group: list[PendingWrite[Any]], mine: PendingWrite[Any], outcomes: list[_Outcome]) -> None:
    """Every write of the group its outcome, the runner's own included; the others are woken."""
    for w, outcome in zip(group, outcomes, strict=True):
        if w is mine:
            w.outcome = outcome
        elif not w.future.done():
            w.outcome = outcome
            w.future.set_result(None)


def _deliver(group: list[PendingWrite[Any]], mine: PendingWrite[Any], done: asyncio.Future[list[_Outcome]]) -> None:
    """A cancelled runner's group, once its transaction ended: each other write gets its outcome."""
    if done.cancelled():
        outcomes: list[_Outcome] = [Raised(asyncio.CancelledError())] * len(group)
    elif (error := done.exception()) is not None:
        outcomes = [Raised(error)] * len(group)
    else:
        outcomes = done.result()
    _deliver_outcomes(group, mine, outcomes)


def _hand_over(queues: dict[GroupKey, GroupQueue], key: GroupKey, queue: GroupQueue) -> None:
    """The next group's first live write runs it (woken with no outcome); with none left the queue goes."""
    while queue.waiting:
        first = queue.waiting[0]
        if not first.future.done():
            first.future.set_result(None)
            return
        queue.waiting.pop(0)  # its task was cancelled while it waited
    queue.busy = False
    if queues.get(key) is queue:
        del queues[key]


async def _commit(group: list[PendingWrite[Any]]) -> list[_Outcome]:
    """Every write's outcome: one transaction for the group, or one each once the group's raised
    (its transaction rolled back: nothing of it is left)."""
    if len(group) > 1:
        try:
            return [Wrote(v) for v in await plain_tx(_all, group)]
        except StoreUnavailableError as exc:  # the store is gone for all of them alike
            return [Raised(exc)] * len(group)
        except Exception:
            log.debug("a group of %d writes rolled back; writing each alone", len(group), exc_info=True)
    outcomes: list[_Outcome] = []
    for w in group:
        try:
            outcomes.append(Wrote(await plain_tx(w.work)))
        except Exception as exc:  # noqa: BLE001 - handed to the write's own caller
            outcomes.append(Raised(exc))
    return outcomes
