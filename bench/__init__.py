"""Benchmarks of helix_dbos against the floor (a hand-written loop on bare DBOS) and the peer (Pydantic AI's
DBOS integration), reported as ratios measured side by side in one run, never as timed tests.

One command runs everything and rewrites the generated part of docs/benchmarks.md:

    python -m bench --db both            # ~15 min on 2 cores; --help for sizes and sections

* `bench.systems`      - one runner module per system measured: `bare`, `pydantic_ai`, `helix`.
* `bench.workload`     - the shared deterministic workload (model script + tool bodies + tool schemas).
* `bench.harness`      - interleaved timing of the systems on one DBOS launch.
* `bench.overhead`     - per-run time ratios (overhead); transactions and statements per step and call (cost).
* `bench.storage`      - bytes per step of one 200-step session, and model step time at step 10 vs 200.
* `bench.recovery`     - crash a real process (`bench.crash_app`), relaunch, time the recovery.
* `bench.concurrency`  - N sessions at once in one process, and on `bench.worker` processes via queues.
* `bench.idle`         - statements per second of an idle runtime against an idle bare DBOS app.
* `bench.imports`      - what importing helix_dbos costs a fresh interpreter.
* `bench.takeover`     - a worker SIGKILLed mid-body: time until a live worker has its run under way.
* `bench.report`, `bench.dbcount`, `bench.machine`, `bench.dbs`, `bench.pools` - the one report, the
  statement counter, the machine, fresh databases and DBOS on them, pool caps.
"""
