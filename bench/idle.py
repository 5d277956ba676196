"""What a launched runtime with no work costs the database, against a bare DBOS app doing nothing.

Every statement on every engine of the process is counted for ``seconds`` (DBOS's system database,
the ledger engines, the executor lock's own connection): DBOS's pollers (its queue manager,
scheduler, background jobs and internal queue) and helix's (lease renewal, the lock watchdog, the
takeover watcher, and the children's queue when this process serves it). Measured after the
runtime's first seconds, when its fast recovery polling has slowed down.
"""

from __future__ import annotations

import time
from typing import Any

from bench.dbcount import DbCounter, attach_standard


def count_idle(runtime: Any, seconds: float) -> dict[str, Any]:
    """Statements per second of this process's engines over ``seconds`` of doing nothing."""
    counter = DbCounter()
    attach_standard(counter, runtime)
    try:
        before_bg = {k: v.copy() for k, v in counter.bg.items()}
        before_fg = counter.snapshot()
        time.sleep(seconds)
        bg = {k: counter.bg[k].minus(before_bg[k]) for k in counter.bg}
        fg = counter.delta(counter.snapshot(), before_fg)
    finally:
        counter.detach()
    stmts = sum(v.stmts for v in bg.values()) + sum(v.stmts for v in fg.values())
    tables: dict[str, int] = {}
    for v in list(bg.values()) + list(fg.values()):
        for table, n in v.by_table.items():
            tables[table] = tables.get(table, 0) + n
    return {"seconds": seconds, "stmts_per_s": stmts / seconds, "by_table_per_s": {k: v / seconds for k, v in sorted(tables.items(), key=lambda kv: -kv[1])}}


def run_idle(helix_url: str, bare_url: str, seconds: float = 10.0) -> dict[str, Any]:
    """Helix runtime idle, then a bare DBOS app idle (one workflow registered, DBOS defaults)."""
    from dbos import DBOS

    import helix_dbos as hx
    from bench.dbs import configure_dbos
    from bench.systems import bare
    from bench.workload import WorkloadSpec
    from helix_dbos.runtime.polling import FAST_RECOVERY_SECONDS

    out: dict[str, Any] = {}
    from bench.systems.helix import make_agent

    runtime = hx.Runtime([make_agent(WorkloadSpec())], database_url=helix_url, executor_id="helix-bench-idle").launch()
    try:
        time.sleep(FAST_RECOVERY_SECONDS + 1)
        out["helix_dbos"] = count_idle(runtime, seconds)
    finally:
        runtime.shutdown()
    configure_dbos(bare_url, launch=False, executor_id="bare-bench-idle", reset=False)
    bare.make_runner(WorkloadSpec())
    DBOS.launch()
    try:
        time.sleep(FAST_RECOVERY_SECONDS + 1)
        out["bare_dbos"] = count_idle(None, seconds)
    finally:
        DBOS.destroy(destroy_registry=True)
    return out
