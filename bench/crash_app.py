"""A real application process for the recovery-latency bench: started, crashed, relaunched.

    python -m bench.crash_app --db URL --executor ID --session SID start   # with HELIX_DBOS_CRASH_AT set
    python -m bench.crash_app --db URL --executor ID --session SID wake    # relaunch: recover, wait

`T0` is taken before any heavy import, so the parent can split a relaunch into interpreter start
(spawn -> T0), imports (-> T1), `runtime.launch()` (-> T2) and recovery until the run is at rest
(-> T3). Inside launch, the sub-phases are timed by wrapping the functions `Runtime.launch()`
calls (measurement only; nothing changes what they do). One JSON line goes to stdout.

helix configures DBOS itself here (its production config), as a user's process would.
"""

from __future__ import annotations

import time

T0 = time.time()

import argparse
import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import helix_dbos as hx
from bench.systems.helix import AGENT_NAME, make_agent
from bench.workload import WorkloadSpec, expected_answer

hx.Runtime  # noqa: B018 - the runtime's modules are imported lazily; a worker needs them, so they count as imports
T1 = time.time()
PHASES: dict[str, float] = {}


def _timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES[label] = PHASES.get(label, 0.0) + time.perf_counter() - t

    return wrapper


def _instrument_launch() -> None:
    """Time the parts of `Runtime.launch()` (ledger migration, executor lock, DBOS, queue)."""
    from dbos import DBOS

    from helix_dbos.runtime.face import launch as rt_module
    from helix_dbos.runtime.process.executor_lock import ExecutorLock

    rt_module.upgrade = _timed("ledger migrations (alembic)", rt_module.upgrade)
    ExecutorLock.acquire = _timed("executor lock", ExecutorLock.acquire)  # type: ignore[method-assign]
    original_launch = DBOS.launch.__func__  # type: ignore[attr-defined]
    DBOS.launch = classmethod(_timed("DBOS.launch (system DB migrations, recovery kick-off)", original_launch))  # type: ignore[method-assign, assignment]
    original_queue = DBOS.register_queue.__func__  # type: ignore[attr-defined]
    DBOS.register_queue = classmethod(_timed("register queue", original_queue))  # type: ignore[method-assign, assignment]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--executor", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("cmd", choices=["start", "wake"])
    args = p.parse_args(argv)
    spec = WorkloadSpec()
    _instrument_launch()
    runtime = hx.Runtime([make_agent(spec)], database_url=args.db, executor_id=args.executor)
    runtime.launch()
    t2 = time.time()
    try:
        if args.cmd == "start":
            result = runtime.start(AGENT_NAME, spec.prompt, session_id=args.session).result(timeout=120)
        else:
            result = runtime.wait(args.session, timeout=120)
        t3 = time.time()
        print(
            json.dumps(
                {
                    "t0": T0,
                    "t1": T1,
                    "t2": t2,
                    "t3": t3,
                    "phases": PHASES,
                    "status": result.status,
                    "run_id": result.run_id,
                    "answer_ok": result.output == expected_answer(spec),
                }
            ),
            flush=True,
        )
    finally:
        runtime.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
