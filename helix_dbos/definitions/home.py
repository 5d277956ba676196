"""Where an agent's own code runs: on DBOS's loop, or on the thread of the caller that waits for the run.

A run's workflow runs on DBOS's background event loop, so an agent's own coroutines (its tool
bodies, its ``@agent.instructions`` functions, its output validators, its toolsets' listing) run
there too, on a thread the caller never sees. That is fine for most code, but not for resources
bound to the thread that made them: pydantic-ai's ``bank_support`` example opens
``sqlite3.connect(':memory:')`` in its ``__main__`` and uses it from its async tools, which works
under ``agent.run_sync`` (the agent's code runs on the caller's thread) and fails on any other
thread ("SQLite objects created in a thread can only be used in that same thread").

``Runtime.run_here`` gives such code its thread back: while the caller waits for the run it serves
an event loop on its own thread, registered here as the run's session's *home*, and the agent's
coroutines for that session are handed to it (with their context, so traces and log fields
follow). Nothing else of the run moves: the model request, the ledger's transactions and recovery
stay on DBOS's loop. With no home (a run started with ``start``, or recovered after a crash in a
process where nobody waits on it) the code runs where it always did.

When the caller stops waiting (the run ended or suspended, or its timeout passed), its home is
withdrawn first and then whatever was already handed to it is run to its end on the caller's
thread, so no coroutine is ever left unstarted on a loop nobody serves.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__: list[str] = []

T = TypeVar("T")

_homes: dict[str, asyncio.AbstractEventLoop] = {}
_guard = threading.Lock()


@contextmanager
def serving(session_id: str, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Make ``loop`` the home of ``session_id``'s agent code while the block runs (one home a session)."""
    with _guard:
        if session_id in _homes:
            raise RuntimeError(f"session {session_id!r} already has a caller serving its agent's code")
        _homes[session_id] = loop
    try:
        yield
    finally:
        with _guard:
            _homes.pop(session_id, None)


def drain(loop: asyncio.AbstractEventLoop) -> None:
    """Run what was handed to ``loop`` before its home was withdrawn to its end (it is not running)."""
    loop.run_until_complete(asyncio.sleep(0))  # the handed-over callbacks create their tasks
    while pending := [t for t in asyncio.all_tasks(loop) if not t.done()]:
        loop.run_until_complete(asyncio.wait(pending))


async def at_home(session_id: str, coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on its session's home loop when one serves it from another thread, else here."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    with _guard:
        home = _homes.get(session_id)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - always awaited inside a loop
            running = None
        if home is None or home is running or home.is_closed():
            home = None
        else:
            context = contextvars.copy_context()

            def begin() -> None:
                if not future.set_running_or_notify_cancel():  # cancelled before it began
                    coro.close()
                    return
                task = home.create_task(coro, context=context)
                task.add_done_callback(lambda t: _settle(future, t))
                # a cancelled waiter (a tool_timeout, a stopping run) cancels the body where it runs
                future.add_done_callback(lambda f: f.cancelled() and home.call_soon_threadsafe(task.cancel))

            home.call_soon_threadsafe(begin)  # under the guard: a withdrawn home is drained after this
    if home is None:
        return await coro
    return await asyncio.wrap_future(future)


def _settle(future: concurrent.futures.Future[T], task: asyncio.Task[T]) -> None:
    if future.done():  # its waiter was cancelled
        return
    if task.cancelled():
        future.cancel()
    elif (exc := task.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(task.result())
