"""A stop of a queued run races a worker dequeuing it, many times, with real workers.

The stop withdraws a run still ``ENQUEUED`` in its own transaction (``dbos_private.withdraw_enqueued``);
a worker's dequeue flips the same row to ``PENDING``, re-checking ``ENQUEUED``. Of the two, one must
win, every time: a run is either withdrawn (it ends at once, ``run_withdrawn``, DBOS ``CANCELLED``,
never a model request nor a body) or a worker ran it and it ends as a run does (stopped at its first
boundary, or completed when the stop came after its end), never both, never left ``queued`` or
``running``. Each race's stop lands at once, or at a random moment up to 0.05 s or 0.3 s after the
entry, around the queue's poll (0.1 s on Postgres, 0.05 s on SQLite), so both sides win some (seen:
12 withdrawn of 24 on Postgres with two workers, 18 on SQLite with one). Outcomes are counted from
the ledger, DBOS's rows and the effects the workers' model and bodies wrote.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helix_dbos.errors import NothingToResumeError
from tests.support.crashkit import dbos_table, helix_table, query
from tests.support.fleet import WorkerPool
from tests.support.waiting import wait_for

APP = "tests.scenarios.withdraw_race_app:runtime"
RACES = 24


@pytest.fixture
def pool(db_url: str, tmp_path: Path) -> Iterator[WorkerPool]:
    p = WorkerPool(db_url, tmp_path, {}, app=APP, effects_var="RACE_EFFECTS")
    yield p
    p.stop_all()


def _dbos_status(db_url: str) -> dict[str, str]:
    table = dbos_table(db_url, "workflow_status")
    return {r["workflow_uuid"]: r["status"] for r in query(db_url, f"SELECT workflow_uuid, status FROM {table}")}


def test_a_stop_racing_a_dequeue_withdraws_or_stops_never_both(db_url: str, pool: WorkerPool) -> None:
    # several worker processes on one database where that holds (Postgres); one on a SQLite file
    for i in range(1 if db_url.startswith("sqlite") else 2):
        pool.worker(f"race-w{i}")
    from tests.scenarios import withdraw_race_app

    front = withdraw_race_app.runtime("client", db_url).launch()
    rng = random.Random()
    receipts: dict[str, Any] = {}
    runs: dict[str, str] = {}
    try:
        for i in range(RACES):
            sid = f"wr-{i}"
            runs[sid] = front.start("racer", sid, session_id=sid).run_id
            time.sleep(rng.choice((0.0, rng.uniform(0.0, 0.05), rng.uniform(0.0, 0.3))))
            try:
                receipts[sid] = front.stop(sid, kind="interrupt" if i % 2 else "abort", requested_by="race")
            except NothingToResumeError:
                receipts[sid] = None  # the run had ended already: the stop came too late to race
        wait_for(f"{RACES} runs at rest", lambda: pool.all_at_rest(RACES), timeout=180)
    finally:
        front.shutdown()

    ledger = {r["run_id"]: r for r in pool.runs()}
    dbos = _dbos_status(db_url)
    rows = query(db_url, f"SELECT run_id, type FROM {helix_table(db_url, 'events')} ORDER BY session_id, seq")
    events = Counter((r["run_id"], r["type"]) for r in rows)
    order: dict[str, list[str]] = {}
    for r in rows:
        order.setdefault(r["run_id"], []).append(r["type"])
    models = Counter(line["session"] for line in pool.effects_of("model"))
    bodies = Counter(line["session"] for line in pool.effects_of("bodies"))
    tally: Counter[str] = Counter()
    problems: list[str] = []
    for sid, run_id in runs.items():
        receipt, run = receipts[sid], ledger[run_id]
        withdrawn = events[(run_id, "run_withdrawn")]
        seen = (f"{sid}: receipt {receipt}, ledger {run['status']}/{run['error_code']}, DBOS {dbos.get(run_id)}, "
                f"withdrawn {withdrawn}, model {models[sid]}, bodies {bodies[sid]}")
        if withdrawn:
            tally["withdrawn"] += 1
            if not (receipt is not None and receipt.stopped and withdrawn == 1 and models[sid] == bodies[sid] == 0
                    and run["started_at"] is None and dbos.get(run_id) == "CANCELLED" and run["status"] in ("interrupted", "failed")):
                problems.append(f"withdrawn, yet: {seen}")
        elif receipt is None:
            tally["completed before the stop"] += 1
            if run["status"] != "completed" or models[sid] != 2 or bodies[sid] != 1:
                problems.append(f"ended before the stop, yet: {seen}")
        else:
            if receipt.stopped or receipt.status not in ("stop_requested", "stop_already_requested"):
                problems.append(f"not withdrawn, yet the stop said it ended the run: {seen}")
            after = order[run_id][order[run_id].index("stop_requested") + 1:] if "stop_requested" in order[run_id] else None
            tally[f"ran, then stopped ({run['status']})"] += 1
            if run["status"] not in ("interrupted", "failed") or run["started_at"] is None or dbos.get(run_id) != "SUCCESS":
                problems.append(f"a worker took it, yet it did not end as a stopped run: {seen}, events after the stop {after}")
            if bodies[sid] > 1 or models[sid] > 2:
                problems.append(f"ran twice: {seen}")
    print(f"{db_url.split(':')[0]}: {dict(tally)}")  # noqa: T201 - the outcome counts, for the log
    assert problems == [], problems
    assert sum(tally.values()) == RACES
