"""Writers of one SQLite file take turns in this process in arrival order, and every way a
transaction ends gives the turn back (SQLite only: Postgres queues row locks itself)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from helix_dbos.ledger import sqlite_turns
from helix_dbos.ledger.engine import create_sync_engine, ensure_sqlite_wal
from helix_dbos.runtime.floor.store_retry import is_transient
from tests.support.waiting import wait_for

WRITERS = 24


@pytest.fixture
def engine(tmp_path: Path) -> sa.Engine:
    url = f"sqlite:///{tmp_path / 'turns.sqlite'}"
    ensure_sqlite_wal(url)
    eng = create_sync_engine(url, pool_size=WRITERS + 2, max_overflow=0)
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE seen (n INTEGER PRIMARY KEY AUTOINCREMENT, writer INTEGER)")
    yield eng
    eng.dispose()


def _turns(engine: sa.Engine) -> sqlite_turns.Turns:
    assert engine.url.database is not None
    return sqlite_turns.turns_for(Path(engine.url.database))


def test_writers_commit_in_the_order_they_asked(engine: sa.Engine) -> None:
    """The busy handler would let them in in whatever order its sleeps fall; turns keep arrival order."""
    holder_in, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO seen (writer) VALUES (-1)")
            holder_in.set()
            release.wait(60)

    asked: list[int] = []
    asked_lock = threading.Lock()

    def write(i: int) -> None:
        with engine.begin() as conn:
            with asked_lock:
                asked.append(i)
            conn.exec_driver_sql("INSERT INTO seen (writer) VALUES (?)", (i,))

    holder = threading.Thread(target=hold)
    holder.start()
    assert holder_in.wait(60)
    writers = []
    for i in range(WRITERS):  # one at a time: each is queued before the next asks
        th = threading.Thread(target=write, args=(i,))
        th.start()
        writers.append(th)
        wait_for(f"writer {i} queued", lambda i=i: len(asked) == i + 1 and len(_turns(engine)._waiting) == i + 1)
    release.set()
    for th in [holder, *writers]:
        th.join(60)
    with engine.connect() as conn:
        order = [w for (w,) in conn.exec_driver_sql("SELECT writer FROM seen ORDER BY n")]
    assert order == [-1, *range(WRITERS)]


def test_every_end_of_a_transaction_gives_the_turn_back(engine: sa.Engine) -> None:
    turns = _turns(engine)

    def free() -> bool:
        return turns.take(-1, 0.01) and (turns.give(-1) is None)

    with engine.connect() as conn:  # a read takes no turn
        conn.exec_driver_sql("SELECT count(*) FROM seen").all()
        assert not turns.held
        conn.exec_driver_sql("WITH x AS (SELECT 1) SELECT * FROM x").all()  # looked like a write; began nothing
        assert not turns.held
    with engine.begin() as conn:  # commit
        conn.exec_driver_sql("INSERT INTO seen (writer) VALUES (1)")
        assert turns.held
    assert free()
    with engine.connect() as conn:  # rollback
        conn.exec_driver_sql("INSERT INTO seen (writer) VALUES (2)")
        conn.rollback()
    assert free()
    conn = engine.connect()  # returned to the pool mid-transaction
    conn.exec_driver_sql("INSERT INTO seen (writer) VALUES (3)")
    conn.close()
    assert free()
    with engine.connect() as conn:  # a failed statement that began the transaction, then rollback
        with pytest.raises(sa.exc.OperationalError):
            conn.exec_driver_sql("INSERT INTO no_such_table VALUES (1)")
        conn.rollback()
    assert free()
    with engine.connect() as conn:  # a commit through the driver's own connection, then SQLAlchemy's end
        conn.exec_driver_sql("INSERT INTO seen (writer) VALUES (4)")
        conn.connection.dbapi_connection.commit()  # type: ignore[union-attr]
        conn.exec_driver_sql("SELECT 1").all()  # the next statement sees no transaction: turn given back
        assert not turns.held
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM seen WHERE writer IN (1, 4)").scalar_one() == 2


def test_a_turn_not_given_in_time_is_sqlites_own_transient_busy_error(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_turns, "TURN_TIMEOUT", 0.2)
    with engine.begin() as holder:
        holder.exec_driver_sql("INSERT INTO seen (writer) VALUES (1)")
        started = time.monotonic()
        with engine.connect() as conn, pytest.raises(sa.exc.OperationalError) as caught:
            conn.exec_driver_sql("INSERT INTO seen (writer) VALUES (2)")
        assert time.monotonic() - started < 20  # the turn's timeout, not SQLite's 30 s busy wait
    assert "database is locked" in str(caught.value) and is_transient(caught.value)
    with engine.begin() as conn:  # the holder's commit gave the turn back; the refused writer held none
        conn.exec_driver_sql("INSERT INTO seen (writer) VALUES (3)")
    with engine.connect() as conn:
        assert [w for (w,) in conn.exec_driver_sql("SELECT writer FROM seen ORDER BY n")] == [1, 3]


def test_a_connection_closed_behind_sqlalchemys_back_gives_its_turn_once(engine: sa.Engine) -> None:
    """The shutdown closes a stuck transactional body's DBAPI connection itself (no commit or
    rollback follows): ``forfeit`` hands its turn on, and the pool's later return of that
    connection gives back nothing that is now another writer's."""
    turns = _turns(engine)
    stuck = engine.connect()
    stuck.exec_driver_sql("INSERT INTO seen (writer) VALUES (1)")
    raw = stuck.connection.dbapi_connection
    sqlite_turns.forfeit(raw)
    raw.close()  # type: ignore[union-attr]
    other = engine.connect()
    other.exec_driver_sql("INSERT INTO seen (writer) VALUES (2)")  # its turn at once, not after the 30 s timeout
    assert turns.held
    stuck.invalidate()  # the pool learns the connection is gone: its stale turn gives nothing
    assert turns.held and not turns.take(-1, 0.01)
    other.commit()
    other.close()
    assert turns.take(-1, 0.01)
    turns.give(-1)
