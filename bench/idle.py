"""What a launched runtime with no work costs the database, against a bare DBOS app doing nothing.

Every statement on every engine of the process is counted (DBOS's system database, the ledger
engines, the executor lock's own connection): DBOS's pollers (its queue manager, scheduler,
background jobs and internal queue) and helix's (lease renewal, the lock watchdog, the takeover
watcher, and the children's queue when this process serves it).

Two windows per system: one a few seconds after launch, and one after DBOS's first minute, when
its scheduler has left its startup polling (once a second for 60 s, then every 30 s): the second
is what a worker that sits idle for hours costs. The two systems run at once, each in its own
process (DBOS is one per process), so the section takes one minute and a bit, not two.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.dbcount import DbCounter, attach_standard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EARLY_AT = 6.0
"""Seconds after launch the first window opens."""
STEADY_AT = 62.0
"""Seconds after launch the second window opens: DBOS's scheduler polls fast for its first 60 s."""


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


def _windows(runtime: Any, launched: float, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, at in (("early", EARLY_AT), ("steady", STEADY_AT)):
        time.sleep(max(0.0, launched + at - time.monotonic()))
        out[name] = count_idle(runtime, seconds)
    return out


def measure(system: str, url: str, seconds: float) -> dict[str, Any]:
    """In this process: launch ``system`` (``helix_dbos`` or ``bare_dbos``) on ``url`` and count both windows."""
    from bench.workload import WorkloadSpec

    if system == "helix_dbos":
        import helix_dbos as hx
        from bench.systems.helix import make_agent

        runtime = hx.Runtime([make_agent(WorkloadSpec())], database_url=url, executor_id="helix-bench-idle").launch()
        launched = time.monotonic()
        try:
            return _windows(runtime, launched, seconds)
        finally:
            runtime.shutdown()
    from dbos import DBOS

    from bench.dbs import configure_dbos
    from bench.systems import bare

    configure_dbos(url, launch=False, executor_id="bare-bench-idle", reset=False)
    bare.make_runner(WorkloadSpec())
    DBOS.launch()
    launched = time.monotonic()
    try:
        return _windows(None, launched, seconds)
    finally:
        DBOS.destroy(destroy_registry=True)


def run_idle(helix_url: str, bare_url: str, seconds: float = 10.0) -> dict[str, Any]:
    """Both systems at once, each in a child process; per system, the early and the steady window
    (the steady one is the figure: ``stmts_per_s`` and ``by_table_per_s`` at the top level)."""
    procs = {
        system: subprocess.Popen(
            [sys.executable, "-m", "bench.idle", system, url, str(seconds)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for system, url in (("helix_dbos", helix_url), ("bare_dbos", bare_url))
    }
    out: dict[str, Any] = {}
    for system, proc in procs.items():
        stdout, _ = proc.communicate(timeout=STEADY_AT + seconds + 120)
        if proc.returncode != 0:
            raise RuntimeError(f"idle measurement of {system} failed (exit {proc.returncode})")
        windows = json.loads(stdout.strip().splitlines()[-1])
        out[system] = {**windows["steady"], "early": windows["early"]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description="one system's idle windows (run by run_idle)")
    p.add_argument("system", choices=("helix_dbos", "bare_dbos"))
    p.add_argument("url")
    p.add_argument("seconds", type=float)
    a = p.parse_args()
    print(json.dumps(measure(a.system, a.url, a.seconds)), flush=True)
    os._exit(0)  # DBOS's threads are gone; skip interpreter teardown


if __name__ == "__main__":
    main()
