"""The reader through a real database outage: a caller polling the ledger rides out what the runs ride out.

Seen once: ``rt.session(...)`` raised SQLAlchemy's raw ``OperationalError`` while a TCP proxy had cut
the database, though the runs' own transactions rode the same cut out. Every read of the ``Reader``
(``session``, ``calls``, ``events``) and every ledger wait (``wait``, ``handle.result()``) now goes
through the same retry (``runtime/floor/store_retry.py``): inside ``store_retry_window`` it returns
the answer once the store is back, past it it raises the typed ``store_unavailable``.

The outage is real: the runtime reaches Postgres through ``tests/support/tcpproxy.py``, which the
test cuts (every connection reset, new ones refused) and restores. The runtime is in this process
(the reads are what is tested); its executor lease (30 s) outlasts every cut here.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos.errors import StoreUnavailableError
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for

WINDOW = 8.0


async def lookup(ctx: hx.ToolContext, key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@pytest.fixture
def through_proxy(db_url: str) -> Iterator[tuple[hx.Runtime, TcpProxy, Any]]:
    """A launched runtime on ``db_url`` through a proxy, and the handle of one completed run."""
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite has no connection to cut: the file is opened in this process, so no proxy can sit "
                    "between the reader and the database (its outage, a held write lock, is tests/processes/test_store_outage.py's "
                    "test_sqlite_busy_*; readers under WAL are not blocked by it)")
    proxy = TcpProxy.for_url(db_url)
    tool = hx.tool(replay="safe", name="lookup")(lookup)
    rt = hx.Runtime([hx.Agent("reader_outage", TestModel(), tools=[tool])], database_url=proxy.url(db_url),
                    executor_id=f"reader-{uuid.uuid4().hex[:8]}", store_retry_window=WINDOW).launch()
    try:
        handle = rt.start("reader_outage", "look it up")
        result = handle.result(timeout=120)
        assert result.status == "completed", result
        yield rt, proxy, handle
    finally:
        proxy.restore()
        rt.shutdown()
        proxy.close()


def reads(rt: hx.Runtime, handle: Any) -> dict[str, Callable[[], Any]]:
    """Every ledger read a caller polls with, each as it is called from outside."""
    session_id, run_id = handle.session_id, handle.run_id
    return {
        "session": lambda: [c.status for c in rt.session(session_id).calls],
        "calls": lambda: [c["status"] for c in rt.reader.calls(session_id=session_id)],
        "events": lambda: rt.reader.events(session_id).status,
        "wait": lambda: rt.wait(session_id).status,
        "wait_run": lambda: rt.wait_run(run_id).status,
        "result": lambda: handle.result().status,
    }


def in_threads(calls: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], dict[str, threading.Thread], dict[str, float]]:
    """Start each read in its own thread; ``outcome`` gets its value or the exception it raised."""
    outcome: dict[str, Any] = {}
    took: dict[str, float] = {}

    def run(name: str, fn: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            outcome[name] = fn()
        except BaseException as exc:  # noqa: BLE001 - what a caller would see, kept to be asserted on
            outcome[name] = exc
        took[name] = time.monotonic() - started

    threads = {name: threading.Thread(target=run, args=(name, fn), daemon=True) for name, fn in calls.items()}
    for t in threads.values():
        t.start()
    return outcome, threads, took


def test_reads_and_waits_ride_out_a_cut_inside_the_window(through_proxy: tuple[hx.Runtime, TcpProxy, Any]) -> None:
    rt, proxy, handle = through_proxy
    calls = reads(rt, handle)
    before = {name: fn() for name, fn in calls.items()}
    assert before["session"] == before["calls"] == ["ok"] and before["wait"] == "completed"

    refused = proxy.refused
    proxy.cut()
    cut_at = time.monotonic()
    outcome, threads, _ = in_threads(calls)
    # every reader met the outage (its connect refused) before the store comes back, a few seconds in
    wait_for("each read tried the cut database", lambda: proxy.refused >= refused + len(calls), timeout=60)
    assert not outcome, f"a read returned or raised during the outage: {outcome}"
    wait_for("the outage lasted 3 s", lambda: time.monotonic() - cut_at >= 3.0, timeout=10)
    assert time.monotonic() - cut_at < WINDOW - 1, "the machine was too slow to keep the cut inside the window"
    proxy.restore()
    for t in threads.values():
        t.join(timeout=60)
    assert outcome == before, outcome


def test_reads_and_waits_fail_typed_past_the_window(through_proxy: tuple[hx.Runtime, TcpProxy, Any]) -> None:
    rt, proxy, handle = through_proxy
    calls = reads(rt, handle)
    proxy.cut()
    outcome, threads, took = in_threads(calls)
    try:
        wait_for("every read gave up", lambda: len(outcome) == len(calls), timeout=WINDOW + 90)
    finally:
        proxy.restore()
    for name, got in outcome.items():
        assert isinstance(got, StoreUnavailableError), (name, repr(got))
        assert not isinstance(got, sa.exc.SQLAlchemyError) and got.code == "store_unavailable"
        assert "store_retry_window" in str(got), (name, str(got))
        assert took[name] >= WINDOW - 0.5, (name, took[name])  # it rode the window out before giving up
    for t in threads.values():
        t.join(timeout=10)
    # and once the store is back, the same reads answer again
    wait_for("the reader answers after the outage", lambda: _answers(calls["session"]), timeout=60)
    assert calls["session"]() == ["ok"]


def _answers(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except StoreUnavailableError:
        return False
    return True
