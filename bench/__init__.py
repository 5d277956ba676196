"""Benchmarks of helix_dbos against the floor (a hand-written loop on bare DBOS) and the peer (Pydantic AI's
DBOS integration), reported as ratios measured side by side in one run, never as timed tests.

One command runs everything and rewrites the generated part of docs/benchmarks.md:

    python -m bench --db both            # ~10 min on 2 cores; --help for sizes and sections

* `bench.workload`     - the shared deterministic workload (model script + tool bodies + tool schemas).
* `bench.baselines`    - `configure_dbos(url)` and the baseline runners (bare DBOS, pydantic-ai DBOSDurability).
* `bench.helix_runner` - the same workload through `helix_dbos.Runtime` (built last: it launches DBOS).
* `bench.harness`      - interleaved `measure(...)`, the runner registry, setup/teardown on one DBOS launch.
* `bench.overhead`     - sections 1-3: per-run time ratios; transactions/statements/round trips per step and call.
* `bench.dbcount`      - the SQLAlchemy event counters behind section 3.
* `bench.storage`      - section 4: bytes per step of one long session, and what DBOS stores per step.
* `bench.recovery`     - section 5: crash a real process (`bench.crash_app`), relaunch, time the recovery.
* `bench.concurrency`  - section 6: N sessions at once in one process, and on `bench.worker` processes via queues.
* `bench.report`, `bench.machine`, `bench.dbs`, `bench.pools` - the report, the machine, fresh databases, pool caps.

The earlier baseline-only CLI still works: `python -m bench.baselines --db both -n 20 [--runners ...]`.
"""
