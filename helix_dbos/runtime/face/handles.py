"""What an entry and an answer hand back: the run it started (``RunHandle``), what an answer did
(``AnswerReceipt``)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ...views import RunResult
from ..process import dbos_private
from .reader import Reader


class Reading(Protocol):
    """What a handle waits through: the ``Runtime`` that started its run (its ``reader``)."""

    @property
    def reader(self) -> Reader: ...


class RunHandle:
    """A run that was started; ``result()`` waits until it completes, fails, stops or suspends."""

    def __init__(self, runtime: Reading, run_id: str, session_id: str, workflow_handle: Any = None) -> None:
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
