"""The model-request rate window holds across processes: any ``period`` holds at most ``limit`` grants.

Real processes on one database (a SQLite file, a Postgres database), each taking grants as fast as
the window lets it; the grants are then read back from the ledger and every window counted.
"""

from __future__ import annotations

import subprocess
import sys

import sqlalchemy as sa

from bench.stats import max_in_window
from helix_dbos.ledger import rate
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.ledger.migrate import upgrade
from tests.support.procs import ROOT, child_env

LIMIT, PERIOD, EACH = 5, 0.5, 8

_CHILD = """
import sys, time
from helix_dbos.ledger import rate
from helix_dbos.ledger.engine import create_sync_engine
engine = create_sync_engine(sys.argv[1])
for _ in range(int(sys.argv[2])):
    while True:
        with engine.begin() as conn:
            grant = rate.try_grant(conn, "agent:a", int(sys.argv[3]), float(sys.argv[4]))
        if grant.epoch is not None:
            print(repr(grant.epoch), flush=True)
            break
        time.sleep(grant.wait)
engine.dispose()
"""



def test_rate_window_holds_across_processes(db_url: str) -> None:
    upgrade(db_url)
    procs = [
        subprocess.Popen([sys.executable, "-c", _CHILD, db_url, str(EACH), str(LIMIT), str(PERIOD)], cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    epochs: list[float] = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        epochs += [float(line) for line in out.split()]
    assert len(epochs) == 3 * EACH
    assert max_in_window(epochs, PERIOD) <= LIMIT
    # the window was used, not starved: 24 grants at 5 per 0.5 s span at least 2 s, and not much more
    assert max(epochs) - min(epochs) >= (3 * EACH // LIMIT - 1) * PERIOD


def test_a_full_window_says_how_long_to_wait(db_url: str) -> None:
    upgrade(db_url)
    engine = create_sync_engine(db_url)
    try:
        for _ in range(2):
            with engine.begin() as conn:
                assert rate.try_grant(conn, "agent:b", 2, 30.0).epoch is not None
        with engine.begin() as conn:
            refused = rate.try_grant(conn, "agent:b", 2, 30.0)
        assert refused.epoch is None and 25.0 < refused.wait <= 30.01
        with engine.begin() as conn:  # another key has its own window
            assert rate.try_grant(conn, "agent:c", 2, 30.0).epoch is not None
        with engine.connect() as conn:  # a refusal wrote nothing
            assert conn.execute(sa.select(sa.func.count()).select_from(t.rate_grants).where(t.rate_grants.c.rate_key == "agent:b")).scalar() == 2
    finally:
        engine.dispose()
