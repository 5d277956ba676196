"""A root task for anyio on DBOS's background loop, held for the runtime's life.

pydantic-ai runs a sync function (a ``FunctionModel``'s function, a sync tool or instructions
function of a pydantic-ai agent) with ``anyio.to_thread.run_sync``, which first looks up the loop's
root task: anyio stops its worker threads when that task ends. It remembers the root once found,
and finds it by scanning every task of the loop for the one ``run_until_complete`` runs. DBOS runs
workflows on a background loop started with ``run_forever``, which has none: every such call
scanned every task in flight (O(runs in flight): ~12% of a worker's CPU with 500 runs in flight,
docs/benchmarks.md) and then took the calling run's own task as the root, so the worker thread it
started was stopped when that run ended and the next run started another.

So the runtime holds one task on that loop until it shuts down and makes it anyio's root: a lookup
is one dictionary read, anyio's worker threads live as long as the runtime and stop when it does
(DBOS's loop shutdown cancels the task too). anyio has no public setter for the root; its private
run variable is the one door here, and if it moves nothing is set and anyio scans as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Future

log = logging.getLogger("helix_dbos")


def _nothing() -> None:
    return None


def hold_root(loop: asyncio.AbstractEventLoop | None) -> Callable[[], None]:
    """Make a task on ``loop`` anyio's root task until the returned function is called (from any
    thread; calling it again, or after the loop closed, does nothing)."""
    if loop is None:
        return _nothing
    try:
        from anyio._backends._asyncio import _root_task
    except ImportError:  # anyio moved it: its scan still works, only slower
        log.debug("anyio's root task variable moved; anyio will scan the loop's tasks", exc_info=True)
        return _nothing
    held: Future[asyncio.Future[None]] = Future()

    async def hold() -> None:
        release: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            _root_task.set(asyncio.current_task())
        except Exception as exc:  # noqa: BLE001 - reported to the launching thread
            held.set_exception(exc)
            return
        held.set_result(release)
        await release

    try:
        asyncio.run_coroutine_threadsafe(hold(), loop)
        release = held.result(timeout=30)
    except Exception:  # the loop stopped, or anyio's variable changed shape: anyio scans as before
        log.debug("could not hold a root task for anyio on DBOS's loop", exc_info=True)
        return _nothing

    def end() -> None:
        if not release.done():
            release.set_result(None)

    def let_go() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: its shutdown cancelled the task already
            loop.call_soon_threadsafe(end)

    return let_go
