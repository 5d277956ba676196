"""Entries through a real database outage: ridden out inside the window, exactly once, typed past it.

``start``, ``stop``, ``retry``, ``resume``, an approval and a new turn must not raise SQLAlchemy's
raw ``OperationalError`` during a TCP-proxy cut, since the runs and the reads ride the same cut out.
Every entry's transaction goes through the same retry (``Runtime._entry_tx``): inside ``store_retry_window`` it succeeds once the store is back; past it
the caller gets ``store_unavailable`` (HTTP: 503 with the JSON error body).

A retried entry must not apply twice when only its commit's acknowledgement was lost: the proxy
(``tests/support/tcpproxy.py``, ``lose_commit_ack``) lets the entry's COMMIT reach the server and
drops the reply, and the test counts the session's runs, answers and stops outside the runtime.

Postgres only: SQLite has no connection to cut (its outage, a held write lock, is retried by the
same code; tests/processes/test_store_outage.py's busy tests).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos.errors import StoreUnavailableError
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.service.app import create_app
from helix_dbos.service.settings import ServiceSettings
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for

WINDOW = 8.0
#: The window of the tests that outlast it: three entries' windows of cut must stay well inside the
#: executor lock's lease (30 s), or a loaded machine's process exits 75 having lost its lock.
SHORT_WINDOW = 3.0


@hx.tool(requires_approval=True, name="book")
def book(ctx: hx.ToolContext, what: str) -> str:
    """Book something (after a person approves)."""
    return f"booked {what}"


def make_runtime(url: str, window: float = WINDOW) -> hx.Runtime:
    agent = hx.Agent("acks", TestModel(call_tools=["book"]), tools=[book])
    return hx.Runtime([agent], database_url=url, executor_id=f"entry-{uuid.uuid4().hex[:8]}", store_retry_window=window)


@pytest.fixture
def through_proxy(pg_url: str) -> Iterator[tuple[hx.Runtime, TcpProxy, str]]:
    proxy = TcpProxy.for_url(pg_url)
    rt = make_runtime(proxy.url(pg_url)).launch()
    try:
        yield rt, proxy, pg_url
    finally:
        proxy.restore()
        rt.shutdown()
        proxy.close()


def counts(url: str, session_id: str) -> dict[str, int]:
    """Rows of the session, read outside the runtime (not through the proxy)."""
    engine = create_sync_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            def n(table: sa.Table, *where: Any) -> int:
                return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(table.c.session_id == session_id, *where)).scalar_one())
            return {
                "runs": n(t.runs),
                "stops": n(t.stops),
                "approvals": n(t.events, t.events.c.type == "approval_decided"),
            }
    finally:
        engine.dispose()


def suspended(rt: hx.Runtime, session_id: str) -> str:
    """A session suspended on its approval; the pending call's dispatch id."""
    result = rt.start("acks", "book a table", session_id=session_id).result(timeout=120)
    assert result.status == "suspended_client_tool", result
    return result.pending[0].dispatch_id


def stopped(rt: hx.Runtime, session_id: str) -> None:
    suspended(rt, session_id)
    assert rt.stop(session_id, kind="abort").stopped


#: each entry: how to get the session ready, the entry, and what it adds to the session exactly once
ENTRIES: dict[str, tuple[Callable[[hx.Runtime, str], Any], Callable[[hx.Runtime, str, Any], Any], dict[str, int]]] = {
    "start": (lambda rt, sid: None, lambda rt, sid, _: rt.start("acks", "book a table", session_id=sid), {"runs": 1}),
    "turn": (suspended, lambda rt, sid, _: rt.start("acks", "a table for four instead", session_id=sid), {"runs": 1}),
    "approve": (suspended, lambda rt, sid, dispatch: rt.approve(sid, dispatch, True), {"runs": 1, "approvals": 1}),
    "stop": (suspended, lambda rt, sid, _: rt.stop(sid, kind="interrupt"), {"stops": 1}),
    "retry": (stopped, lambda rt, sid, _: rt.retry(sid), {"runs": 1}),
    "resume": (stopped, lambda rt, sid, _: rt.resume(sid, mode="with_message", message="try again"), {"runs": 1}),
}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_an_entry_whose_commit_acknowledgement_is_lost_applies_once(entry: str, through_proxy: tuple[hx.Runtime, TcpProxy, str]) -> None:
    rt, proxy, url = through_proxy
    ready, enter, adds = ENTRIES[entry]
    sid = f"ack-{entry}-{uuid.uuid4().hex[:8]}"
    setup = ready(rt, sid)
    before = counts(url, sid)
    proxy.lose_commit_ack(sid.encode())
    out = enter(rt, sid, setup)  # not the driver's "server closed the connection unexpectedly"
    assert proxy.acks_lost == 1, "the entry's COMMIT reply was not the one lost"
    after = counts(url, sid)
    assert {k: after[k] - before[k] for k in after} == {"runs": 0, "stops": 0, "approvals": 0} | adds, (before, after)
    if entry == "stop":
        assert out.stopped and out.status == "interrupted", out
    elif entry == "approve":
        assert out.run is not None and out.run.result(timeout=120).status == "completed"
    else:  # the handle of the one run the entry opened, which runs on
        assert out.result(timeout=120).status in ("suspended_client_tool", "completed")


def _table_count(url: str, sql: str, **params: Any) -> int:
    engine = create_sync_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(sql), params).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.parametrize("mode", ["process", "client"])
def test_a_start_that_mints_its_session_applies_once_and_records_nothing_else(mode: str, pg_url: str) -> None:
    """A start without a session id (the id minted by the entry) whose COMMIT reply is lost: one
    session, one run, and in client mode one queued workflow row; and no exactly-once record beside
    them (the entry is found again by the ids it minted, not by a ``tx_outputs`` row)."""
    proxy = TcpProxy.for_url(pg_url)
    agent = hx.Agent("acks", TestModel(call_tools=["book"]), tools=[book])
    kw: dict[str, Any] = {"executor_id": f"entry-{uuid.uuid4().hex[:8]}"} if mode == "process" else {"mode": "client"}
    rt = hx.Runtime([agent], database_url=proxy.url(pg_url), store_retry_window=WINDOW, **kw).launch()
    try:
        marker = f"mint-{mode}-{uuid.uuid4().hex}"
        records = _table_count(pg_url, "SELECT count(*) FROM helix.tx_outputs")
        proxy.lose_commit_ack(marker.encode())
        handle = rt.start("acks", f"book a table ({marker})")
        assert proxy.acks_lost == 1, "the entry's COMMIT reply was not the one lost"
        runs = _table_count(pg_url, "SELECT count(*) FROM helix.runs WHERE entry_message LIKE :m", m=f"%{marker}%")
        sessions = _table_count(pg_url, "SELECT count(DISTINCT session_id) FROM helix.runs WHERE entry_message LIKE :m", m=f"%{marker}%")
        assert (runs, sessions) == (1, 1)
        assert counts(pg_url, handle.session_id)["runs"] == 1
        if mode == "client":
            queued = _table_count(pg_url, "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = :r AND status = 'ENQUEUED'", r=handle.run_id)
            assert queued == 1
            assert _table_count(pg_url, "SELECT count(*) FROM helix.tx_outputs") == records
        else:
            assert handle.result(timeout=120).status == "suspended_client_tool"
    finally:
        proxy.restore()
        rt.shutdown()
        proxy.close()


def test_entries_ride_out_a_cut_inside_the_window(through_proxy: tuple[hx.Runtime, TcpProxy, str]) -> None:
    rt, proxy, url = through_proxy
    sids = {name: f"cut-{name}-{uuid.uuid4().hex[:8]}" for name in ENTRIES}
    setups = {name: ENTRIES[name][0](rt, sid) for name, sid in sids.items()}
    before = {name: counts(url, sid) for name, sid in sids.items()}
    outcome: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            outcome[name] = ENTRIES[name][1](rt, sids[name], setups[name])
        except BaseException as exc:  # noqa: BLE001 - what a caller would see, asserted below
            outcome[name] = exc

    refused = proxy.refused
    proxy.cut()
    cut_at = time.monotonic()
    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in ENTRIES]
    for th in threads:
        th.start()
    wait_for("each entry tried the cut database", lambda: proxy.refused >= refused + len(ENTRIES), timeout=60)
    assert not outcome, f"an entry returned or raised during the outage: {outcome}"
    wait_for("the outage lasted 2 s", lambda: time.monotonic() - cut_at >= 2.0, timeout=10)
    assert time.monotonic() - cut_at < WINDOW - 1, "the machine was too slow to keep the cut inside the window"
    proxy.restore()
    for th in threads:
        th.join(timeout=120)
    for name, got in outcome.items():
        assert not isinstance(got, BaseException), (name, repr(got))
        after = counts(url, sids[name])
        assert {k: after[k] - before[name][k] for k in after} == {"runs": 0, "stops": 0, "approvals": 0} | ENTRIES[name][2], name


def test_entries_past_the_window_are_store_unavailable(pg_url: str) -> None:
    """The Python API raises the typed error; the HTTP service answers 503 with its JSON body."""
    proxy, url = TcpProxy.for_url(pg_url), pg_url
    rt = make_runtime(proxy.url(pg_url), SHORT_WINDOW).launch()
    try:
        _past_the_window(rt, proxy, url)
    finally:
        proxy.restore()
        rt.shutdown()
        proxy.close()


def _past_the_window(rt: hx.Runtime, proxy: TcpProxy, url: str) -> None:
    sid = f"past-{uuid.uuid4().hex[:8]}"
    dispatch = suspended(rt, sid)
    proxy.cut()
    try:
        for name, call in {"start": lambda: rt.start("acks", "go"), "approve": lambda: rt.approve(sid, dispatch, True),
                           "stop": lambda: rt.stop(sid)}.items():
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError) as caught:
                call()
            assert not isinstance(caught.value, sa.exc.SQLAlchemyError) and caught.value.code == "store_unavailable", name
            assert "store_retry_window" in str(caught.value) and time.monotonic() - started >= SHORT_WINDOW - 0.5, name
    finally:
        proxy.restore()
    assert counts(url, sid) == {"runs": 1, "stops": 0, "approvals": 0}  # nothing was applied


def test_http_entries_past_the_window_are_503_store_unavailable(pg_url: str) -> None:
    proxy = TcpProxy.for_url(pg_url)
    rt = make_runtime(proxy.url(pg_url), SHORT_WINDOW)
    settings = ServiceSettings(host="127.0.0.1", keys=[], allowed_hosts=["testserver"])
    try:
        with TestClient(create_app(rt, settings=settings), raise_server_exceptions=False) as http:
            sid = f"http-{uuid.uuid4().hex[:8]}"
            ok = http.post("/sessions", params={"wait": 60}, json={"agent": "acks", "message": "book a table", "session_id": sid})
            assert ok.status_code == 202 and ok.json()["status"] == "suspended_client_tool", ok.text
            dispatch = ok.json()["pending"][0]["dispatch_id"]
            proxy.cut()
            try:
                for path, body in ((f"/sessions/{sid}/stop", {}), (f"/sessions/{sid}/calls/{dispatch}/approval", {"approved": True}),
                                   ("/sessions", {"agent": "acks", "message": "go"})):
                    got = http.post(path, json=body)
                    assert got.status_code == 503, (path, got.status_code, got.text)
                    assert got.json()["code"] == "store_unavailable" and set(got.json()) == {"error", "code", "detail"}, got.text
            finally:
                proxy.restore()
            # and once the store is back, the same entry goes through
            stop = http.post(f"/sessions/{sid}/stop", json={})
            assert stop.status_code == 202, stop.text
    finally:
        proxy.close()
    assert counts(pg_url, sid)["stops"] == 1


def test_an_outage_between_admission_and_the_workflow_start_is_bounded(pg_url: str) -> None:
    """The entry's transaction commits, then the database goes away before DBOS records the run's
    workflow (DBOS retries that write with no deadline): the entry gives up past
    ``store_retry_window`` with ``store_unavailable`` naming the admitted run, instead of hanging;
    once the database is back the run starts (DBOS's own retry goes on), and it is the only run."""
    proxy = TcpProxy.for_url(pg_url)
    window = 3.0
    agent = hx.Agent("acks", TestModel(call_tools=["book"]), tools=[book])
    rt = hx.Runtime([agent], database_url=proxy.url(pg_url), executor_id=f"entry-{uuid.uuid4().hex[:8]}", store_retry_window=window).launch()
    try:
        sid = f"gap-{uuid.uuid4().hex[:8]}"
        proxy.cut_after_commit(sid.encode())
        outcome: dict[str, Any] = {}

        def enter() -> None:
            started = time.monotonic()
            try:
                outcome["value"] = rt.start("acks", "book a table", session_id=sid)
            except BaseException as exc:  # noqa: BLE001 - asserted below
                outcome["value"] = exc
            outcome["took"] = time.monotonic() - started

        th = threading.Thread(target=enter, daemon=True)
        th.start()
        wait_for("the entry returned or raised while the database was cut", lambda: "took" in outcome, timeout=window + 60)
        assert proxy.cuts_after_commit == 1, "the cut did not follow the entry's commit"
        got = outcome["value"]
        assert isinstance(got, StoreUnavailableError) and got.code == "store_unavailable", repr(got)
        assert "store_retry_window" in str(got) and sid in str(got), str(got)
        assert outcome["took"] >= window - 0.5, outcome
        proxy.restore()
        assert rt.wait(sid, timeout=120).status == "suspended_client_tool"
    finally:
        proxy.restore()
        rt.shutdown()
        proxy.close()
    assert counts(pg_url, sid)["runs"] == 1
