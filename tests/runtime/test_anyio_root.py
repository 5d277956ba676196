"""anyio's root task on DBOS's background loop (``helix_dbos/runtime/process/anyio_root.py``).

pydantic-ai runs a sync model function (and a pydantic-ai agent's sync tools) through
``anyio.to_thread.run_sync``. On DBOS's ``run_forever`` loop anyio found no root task: it scanned
every task in flight on each call and took the calling run's task as the root, so the worker thread
it started was stopped when that run ended. With the runtime holding a root, the scan is gone and
one worker thread serves run after run, until the runtime shuts down.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.runtime.process import dbos_private
from tests.conftest import one_database


def _root_on(loop: asyncio.AbstractEventLoop) -> asyncio.Task[object]:
    """What anyio takes as ``loop``'s root task, asked on the loop itself, as ``run_sync`` asks."""
    from anyio._backends._asyncio import find_root_task

    async def ask() -> asyncio.Task[object]:
        return find_root_task()

    return asyncio.run_coroutine_threadsafe(ask(), loop).result(timeout=60)


def test_the_private_name_the_door_sets_is_the_one_anyio_reads() -> None:
    """An anyio upgrade that moves the run variable fails here, not as a slow worker."""
    import inspect

    from anyio._backends import _asyncio
    from anyio.lowlevel import RunVar

    assert isinstance(_asyncio._root_task, RunVar)
    assert "_root_task.get(None)" in inspect.getsource(_asyncio.find_root_task)


@one_database  # the event loop's threads, not the database
def test_sync_model_functions_share_one_worker_thread_across_runs(make_runtime: Callable[..., hx.Runtime]) -> None:
    threads: list[threading.Thread] = []  # the objects themselves: an exited thread's ident can be reused

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        threads.append(threading.current_thread())
        return ModelResponse(parts=[TextPart("done")])

    rt = make_runtime([hx.Agent("sync_model", FunctionModel(reply))])
    for i in range(4):
        assert rt.start("sync_model", f"go {i}").result(timeout=120).output == "done"
    assert len(threads) == 4
    assert all(t is threads[0] for t in threads), [t.name for t in threads]
    assert threads[0] is not threading.main_thread()


@one_database  # the event loop's root task, not the database
def test_the_root_is_held_while_launched_and_let_go_at_shutdown(make_runtime: Callable[..., hx.Runtime]) -> None:
    rt = make_runtime([hx.Agent("echo", FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("hi")])))])
    loop = dbos_private.background_workflow_loop()
    assert loop is not None, "DBOS runs this test's workflows on its own background loop"
    root = _root_on(loop)
    assert _root_on(loop) is root and not root.done()
    assert root.get_coro().__qualname__.endswith("hold_root.<locals>.hold")  # type: ignore[union-attr]
    rt.shutdown()
    assert root.done()


def test_a_moved_anyio_name_leaves_anyio_to_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """If anyio renames its variable the runtime holds nothing and runs as before (no error)."""
    import sys

    from helix_dbos.runtime.process import anyio_root

    monkeypatch.setitem(sys.modules, "anyio._backends._asyncio", None)  # an import of it raises ImportError
    loop = asyncio.new_event_loop()
    try:
        let_go = anyio_root.hold_root(loop)
        assert let_go() is None
        assert asyncio.all_tasks(loop) == set()  # nothing was scheduled on the loop
    finally:
        loop.close()
