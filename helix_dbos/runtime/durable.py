"""Durable building blocks the child phase shares: exactly-once ledger transactions and steps.

The run workflow's registered function, which the child phase (remote sub-agents in ``children.py``,
companions in ``companions.py``) starts and enqueues, is not kept here: it lives on the launched
runtime's ``Registry``, handed down to the child phase.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

from dbos import DBOS

from ..ledger.escape import escape_json, unescape_json
from . import dbos_private
from .state import env
from .store_retry import retrying

if TYPE_CHECKING:
    from .registry import Registry

#: DBOS statuses after which a workflow will never write again: its ledger outcome is final or lost.
DBOS_TERMINAL: Final = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})

log = logging.getLogger("helix_dbos")


class ProcessStopping(BaseException):
    """The process stopped executing this workflow mid-way (Ctrl-C, SIGTERM, ``runtime.shutdown()``).

    ``DBOS.destroy`` cancels every task on its event loop; a cancelled workflow task surfaces in
    DBOS's workflow thread as ``concurrent.futures.CancelledError``, an ``Exception``, which DBOS
    records as the workflow's ``ERROR`` outcome, and DBOS never recovers an ``ERROR`` workflow: the
    ledger run would stay ``running`` for ever. Raised instead, this ``BaseException`` gets past
    DBOS's ``except Exception``, so no outcome is recorded, the workflow stays ``PENDING`` and this
    executor id's next launch recovers it by the recovery rules, like after a crash.
    """


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
            except Exception:
                what = "a workflow"
            log.warning("%s interrupted by the process stopping; the next launch with that executor id recovers it", what)
            raise ProcessStopping(f"{what} was interrupted by the process stopping") from exc

    return workflow


async def tx(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """An exactly-once ledger transaction: DBOS records its output with the commit, replay returns it.

    It runs the blocking datasource in a worker thread (the DBOS context travels with it), so a
    transaction is one tight, blocking unit of work: on SQLite the write lock is never held across
    event-loop turns, where anything else blocking the loop would wait on that lock until it timed out.
    The output is recorded escaped (``recorded``).

    In an outage DBOS re-runs it (connection and serialization errors, SQLite busy) until the store
    answers, with no deadline; its commit carries DBOS's record, so a retry after a lost
    acknowledgement returns the recorded output instead of writing twice.
    """
    ds = env().datasource

    def body(*a: Any) -> Any:
        return escape_json(fn(ds.sql_session().connection(), *a))

    return unescape_json(await asyncio.to_thread(ds.run_tx_step, {"name": name, "isolation_level": env().isolation}, body, *args))


def _short_tx(fn: Callable[..., Any], *args: Any) -> Any:
    with env().datasource.engine.begin() as conn:
        return fn(conn, *args)


async def plain_tx(fn: Callable[..., Any], *args: Any) -> Any:
    """A short ledger transaction in a worker thread, outside the datasource's once-only bookkeeping
    (inside a step it belongs to the step: the attempt gate, a result write, a read).

    Transient store errors re-run the whole transaction for up to ``store_retry_window`` seconds,
    then raise ``StoreUnavailableError``. A commit whose acknowledgement was lost may have committed,
    so ``fn`` must be idempotent across such a retry: the writers passed here are (the attempt gate
    by its token in ``bodies.py``, the result write by its attempt fence).
    """
    return await retrying(f"running {getattr(fn, '__name__', 'a ledger transaction')}", lambda: asyncio.to_thread(_short_tx, fn, *args))


def recorded(value: Any) -> Any:
    """A value as DBOS may record it: every string through the ledger's escape (``ledger/escape.py``).

    DBOS writes its JSON with non-ASCII characters raw, and a lone surrogate in a model reply or a
    tool's text cannot be encoded for either database, so the output of the step that holds it was
    never recorded and the run failed after the model was paid. Outputs are escaped for DBOS and
    unescaped when DBOS hands them back, fresh or replayed, so workflow code sees the original.
    """
    return escape_json(value)


async def step(name: str, fn: Callable[..., Awaitable[Any]], *args: Any, **options: Any) -> Any:
    """A DBOS step (at-least-once; its recorded output is what a replay sees), recorded escaped."""

    async def body(*a: Any) -> Any:
        return recorded(await fn(*a))

    return unescape_json(await DBOS.run_step_async({"name": name, **options}, body, *args))


#: Kept for ``workflow.py``'s cancel settling; new callers use ``dbos_private.workflow_status``.
dbos_status = dbos_private.workflow_status


def poll_interval(registry: Registry) -> float:
    """How often a waiting parent re-reads the ledger: SQLite polls anyway, Postgres round trips are cheap."""
    return 0.05 if registry.env.settings.sqlite else 0.1
