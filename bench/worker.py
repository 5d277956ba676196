"""A worker process for the two-worker concurrency bench: serves DBOS queues, starts nothing.

    python -m bench.worker --db URL --executor ID

It configures DBOS like the in-process bench (`configure_dbos`, its own executor id, no reset: the
parent owns the database), registers the bare-DBOS workflow and its queue, then launches helix
(which registers `helix.run` and the `helix_runs` queue and launches DBOS). Then it prints `ready`
and serves until its stdin closes (the parent's way to stop it) or it gets SIGTERM.

Both workers register the same workflow names under the same application name and version as the
parent's `DBOSClient` uses, so either may dequeue any run. `--serve bare` / `--serve helix` makes a
process of one side only (bench/scale.py): it defines and polls that side's queues and no other.
`--serve floor` (plain DBOS steps, no pydantic-ai: `bench.systems.floor`) and `--serve peer`
(Pydantic AI's `DBOSAgent`: `bench.systems.pydantic_ai.make_peer_agent`) are the scale section's
other two shapes, each on its own DBOS queue.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

BARE_QUEUE = "bench_bare"
FLOOR_QUEUE = "bench_floor"
PEER_QUEUE = "bench_peer"
DBOS_QUEUES = {"bare": BARE_QUEUE, "floor": FLOOR_QUEUE, "peer": PEER_QUEUE}
"""The queue of each shape served by plain DBOS (helix's are its own)."""
QUEUE_POLL_S = 0.1


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--executor", required=True)
    p.add_argument("--helix-mode", default="process", choices=["process", "worker"], help="worker: serve helix's entry queues (bench/scale.py)")
    p.add_argument("--concurrency", type=int, default=None, help="helix worker_concurrency of the entry queues (with --helix-mode worker)")
    p.add_argument("--owner-share", type=int, default=None, help="helix owner_share (runs per owner per worker, with --helix-mode worker)")
    p.add_argument("--limited", action="store_true", help="also define the limited agents of bench/scale.py (max_running, model_requests)")
    p.add_argument("--rate", type=int, default=10, help="model requests per second of the rate-limited agent (with --limited)")
    p.add_argument("--serve", default="both", choices=["both", "bare", "helix", "floor", "peer"],
                   help="bare/helix/floor/peer: this process defines and dequeues only that shape's workflows (bench/scale.py); both: bare's and helix's")
    args = p.parse_args(argv)

    from dbos import DBOS

    from bench.dbs import configure_dbos
    from bench.systems.bare import make_runner as make_bare_dbos_runner
    from bench.systems.helix import HelixRunner
    from bench.pools import WORKER_POOLS
    from bench.workload import WorkloadSpec

    spec = WorkloadSpec()
    configure_dbos(args.db, launch=False, reset=False, executor_id=args.executor, sys_db_pool_size=WORKER_POOLS["dbos"])
    if args.serve in ("both", "bare"):
        make_bare_dbos_runner(spec)
    elif args.serve == "floor":
        from bench.systems.floor import make_runner as make_floor_runner

        make_floor_runner(spec)
    elif args.serve == "peer":
        from bench.systems.pydantic_ai import make_peer_agent

        peer = make_peer_agent(spec)  # noqa: F841 - kept alive: DBOS's registry points at its workflows
    extra: dict[str, Any] = {}
    agents: list[Any] = []
    limits: dict[str, Any] = {}
    if args.limited:
        from bench.systems.helix import limited_agents

        agents, limits = limited_agents(spec, args.rate)
        extra = {"agents": agents, "limits": limits}
    # DBOS polls every queue of the application it finds in dbos.queues unless told which: a process
    # of one side must not pay the other side's polls (a 0.1 s poll of an idle queue is two or three
    # transactions and 2.5-5 ms of this process's CPU: docs/benchmarks.md, "Scale: where a worker's CPU went")
    if args.serve in DBOS_QUEUES:
        DBOS.listen_queues([DBOS_QUEUES[args.serve]])
    elif args.serve == "helix":
        from bench.systems.helix import make_agent
        from helix_dbos.runtime.process import polling, queues

        # what the runtime would listen to on its own (a worker: the children's queue only when an
        # agent can enqueue there); this process configured DBOS itself, so it says so here
        children = ["helix_runs"] if polling.serves_children_queue([make_agent(spec), *agents]) else []
        DBOS.listen_queues(sorted({queues.ENTRY_QUEUE, *children, *(queues.entry_queue(a.name, limits) for a in agents)}))
    helix = None
    if args.serve in ("both", "helix"):
        helix = HelixRunner(
            spec, database_url=args.db, tx_pool=WORKER_POOLS["ds"], api_pool=WORKER_POOLS["sync"],
            mode=args.helix_mode, worker_concurrency=args.concurrency, owner_share=args.owner_share, **extra,
        )
    else:
        DBOS.launch()
    if args.serve == "both":
        DBOS.register_queue(BARE_QUEUE, polling_interval_sec=QUEUE_POLL_S)
    elif args.serve in DBOS_QUEUES:
        DBOS.register_queue(DBOS_QUEUES[args.serve], polling_interval_sec=QUEUE_POLL_S)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", helix.runtime.executor_id if helix is not None else args.executor, flush=True)

    def wait_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    stop.wait()
    if helix is not None:
        helix.close()
    DBOS.destroy(destroy_registry=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
