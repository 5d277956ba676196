"""Internal: blocking user code (a sync tool body, a sync reconcile check) in a thread nobody waits for at exit.

``asyncio.to_thread`` runs on the event loop's default executor, whose worker threads Python joins
when the interpreter exits: a check that loops forever is answered ``outcome_unknown`` after its
``reconcile_timeout`` (the await is abandoned), yet its thread would keep the process from ever exiting.
Code helix_dbos does not control runs here instead, one daemon thread per call: an
abandoned one (timed out, or its run's task cancelled by ``runtime.shutdown()``) goes on until it
returns or the process exits, and the exit does not wait for it. Whatever it does after it was
abandoned is never recorded: its awaiting side is gone, and the call was answered by the rules
(``outcome_unknown`` for a check that never answered; a body cut off by a shutdown is recovered by
the next launch as after a crash).

helix_dbos's own blocking work (ledger transactions) stays on the default executor: it is bounded
by the database's timeouts, and reusing the executor's threads is cheaper on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def in_daemon_thread(fn: Callable[..., T], *args: Any, name: str = "helix-user-code") -> T:
    """``fn(*args)`` in a new daemon thread (with the caller's context variables, as ``to_thread``
    copies them); the awaiting side may be cancelled or time out, and the thread is then abandoned."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # abandoned (cancelled, timed out): nobody wants the answer now
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def run() -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(fn, *args))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side, as to_thread does
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is stopping and nobody waits
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future
