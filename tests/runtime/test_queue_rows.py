"""The entry queues' row in ``dbos.queues`` keeps what the workers set (docs/scaling.md).

DBOS re-reads a queue's row on every poll, so a launch that rewrote it changed every worker's
limits at once: a front end (``mode="client"``) or a process launched without ``worker_concurrency``
/ ``owner_share`` used to write them back to unlimited. Only a launch that sets them writes them;
every launch writes the agent's ``max_running`` (``global_concurrency``).
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from tests.support.crashkit import query


def _rows(db_url: str) -> dict[str, tuple[Any, Any, Any]]:
    table = "queues" if db_url.startswith("sqlite") else "dbos.queues"
    rows = query(db_url, f"SELECT name, concurrency, worker_concurrency, partition_worker_concurrency FROM {table} WHERE name LIKE 'helix_entries%'")
    return {r["name"]: (r["concurrency"], r["worker_concurrency"], r["partition_worker_concurrency"]) for r in rows}


def _launched(db_url: str, **kw: Any) -> None:
    agent = hx.Agent("capped", TestModel())
    rt = hx.Runtime([agent], database_url=db_url, executor_id="queue-rows", **kw)
    rt.launch()
    rt.shutdown(wait_seconds=0)


def test_a_front_end_keeps_the_workers_queue_settings(db_url: str, monkeypatch: Any) -> None:
    limits = {"capped": hx.AgentLimits(max_running=5)}
    _launched(db_url, mode="worker", worker_concurrency=20, owner_share=2, limits=limits)
    set_by_worker = {"helix_entries": (None, 20, 2), "helix_entries.capped": (5, 5, 2)}
    assert _rows(db_url) == set_by_worker
    _launched(db_url, mode="client", limits=limits)  # a front end sets no per-worker values
    assert _rows(db_url) == set_by_worker
    _launched(db_url, limits=limits)  # nor does a single process with limits
    assert _rows(db_url) == set_by_worker
    # max_running is every launch's: a lower one clamps the per-worker values it keeps (a limit
    # changed on purpose: the fleet's record of it is replaced, docs/scaling.md)
    monkeypatch.setenv("HELIX_DBOS_REPLACE_LIMITS", "1")
    _launched(db_url, mode="client", limits={"capped": hx.AgentLimits(max_running=3)})
    assert _rows(db_url) == {"helix_entries": (None, 20, 2), "helix_entries.capped": (3, 3, 2)}
    # a worker that sets them writes them
    _launched(db_url, mode="worker", worker_concurrency=8, limits=limits)
    assert _rows(db_url) == {"helix_entries": (None, 8, 8), "helix_entries.capped": (5, 5, 5)}
