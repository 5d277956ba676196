"""`python -m bench --db both`: every benchmark of helix_dbos, one command, one report.

Per database: (overhead) interleaved per-run time of helix_dbos, the bare DBOS loop and Pydantic
AI's DBOSDurability; (cost) transactions and statements per step and per call, and on Postgres the
WAL bytes and Postgres CPU of a run (`bench.walcount`); (storage) growth of
one 200-step session and its model step time at step 10 vs 200; (recovery) relaunch latency with
real crashed processes; (concurrency) N sessions at once in one process, and on two worker
processes sharing Postgres; (idle) an idle runtime's statements per second against an idle bare
DBOS app; (takeover) a worker SIGKILLed mid-body until a live one has its run under way; then
(imports) what importing helix_dbos costs. Prints each table as it is measured and rewrites the
generated region of docs/benchmarks.md, starting with the overhead targets before and now. Every
section uses a fresh database (Postgres `helix_bench_*` databases on `--pg-url`'s server, SQLite
files in `--sqlite-dir`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from typing import Any

from bench import report
from bench.dbs import DEFAULT_PG_BASE, default_sqlite_dir, fresh_database

SECTIONS = ("overhead", "cost", "storage", "recovery", "concurrency", "idle", "imports", "takeover", "scale")
TAKEOVER_AFTER = 5.0
"""The lease the takeover section kills workers under (docs/operations.md quotes its figures)."""
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PREAMBLE = """# Benchmarks

How much helix_dbos costs on top of DBOS, measured by `bench/` (`python -m bench --db both`).
The generated region below is rewritten by every run of the bench; the analysis after it is
written by hand from the profiles.
"""


def _print(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    p.add_argument("-n", type=int, default=20, help="measured runs per runner (overhead)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--wal-runs", type=int, default=5, help="runs per system of the cost section's WAL and Postgres CPU figures (Postgres; 0: skip)")
    p.add_argument("--storage-steps", type=int, default=200)
    p.add_argument("--idle-seconds", type=float, default=10.0, help="idle window (idle)")
    p.add_argument("--kills", type=int, default=20, help="worker kills per database (takeover)")
    p.add_argument("--recovery-repeats", type=int, default=3)
    p.add_argument("--sessions", type=int, default=200, help="sessions started at once (Postgres)")
    p.add_argument("--sqlite-sessions", type=int, default=40, help="sessions at once on SQLite, one process (0: skip)")
    p.add_argument("--workers", type=int, default=2, help="worker processes for the queue case (Postgres only; 0: skip)")
    p.add_argument("--scale-sessions", type=int, default=1000, help="sessions of the scale section (front end + 1 and 2 workers, Postgres)")
    p.add_argument("--scale-workers", default="1,2", help="worker counts of the scale section's front end + workers case")
    p.add_argument("--scale-shapes", default="floor,bare,peer,helix", help="shapes of the scale section, side by side (floor, bare, peer, helix)")
    p.add_argument("--scale-repeats", type=int, default=1,
                   help="rounds of the scale section's bare and helix batches per worker count (the first beside every shape); the targets read their median")
    p.add_argument("--scale-limits", default=True, action=argparse.BooleanOptionalAction, help="the scale section's limits and fairness case")
    p.add_argument("--scale-big", type=int, default=0, help="sessions of one large scale batch checked against docs/scaling.md's capacity model (0: skip)")
    p.add_argument("--scale-big-workers", type=int, default=4, help="worker processes of --scale-big")
    p.add_argument("--scale-big-shapes", default="floor,helix", help="shapes of --scale-big")
    p.add_argument("--scale-big-concurrency", type=int, default=100, help="runs in flight per worker of --scale-big")
    p.add_argument("--pg-url", default=DEFAULT_PG_BASE, help="any database URL on the Postgres server to use")
    p.add_argument("--sqlite-dir", default=default_sqlite_dir())
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"), help="report to rewrite ('' to skip)")
    p.add_argument("--json", default="", help="also dump raw results here")
    p.add_argument("--check", action="store_true", help="exit 1 unless every answer and run was right (smoke test)")
    p.add_argument("--from-json", default="", help="only re-render the report from a saved --json file")
    args = p.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        report.write(args.out, report.generated(saved["results"], saved["meta"]), PREAMBLE)
        _print(f"wrote {args.out} from {args.from_json}")
        return 0

    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}")
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    started = time.time()

    from bench.machine import describe

    machine = describe(args.pg_url if "postgres" in dbs else None)
    _print(report.machine_section(machine))
    results: dict[str, Any] = {}

    def db(kind: str, name: str) -> Any:
        return fresh_database(kind, name, pg_base=args.pg_url, sqlite_dir=args.sqlite_dir)

    timings: dict[str, float] = {}
    clock = [time.time()]

    def lap(label: str) -> None:
        now = time.time()
        timings[label] = now - clock[0]
        clock[0] = now

    for kind in dbs:
        if "overhead" in sections:
            from bench.overhead import run_overhead

            with db(kind, "helix_bench_overhead") as url:
                r = run_overhead(url, args.n, args.warmup)
            results.setdefault("overhead", {})[kind] = {"stats": r.stats, "probe": r.probe}
            _print(report.overhead_section({"overhead": {kind: results["overhead"][kind]}}, args.n, args.warmup))
            lap(f"overhead/{kind}")
        if "cost" in sections:
            from bench.overhead import run_write_cost

            with db(kind, "helix_bench_cost") as url:
                figs = run_write_cost(url)
            results.setdefault("cost", {})[kind] = {name: asdict(f) for name, f in figs.items()}
            if kind == "postgres" and args.wal_runs > 0:
                from bench.walcount import measure_both

                results.setdefault("wal", {})[kind] = measure_both(args.pg_url, args.wal_runs)
            _print(report.cost_section({"cost": {kind: results["cost"][kind]}, "wal": {k: v for k, v in results.get("wal", {}).items() if k == kind}}))
            lap(f"cost/{kind}")
        if "storage" in sections:
            from bench.storage import run_storage

            with db(kind, "helix_bench_storage") as url:
                s = run_storage(url, total_steps=args.storage_steps)
            results.setdefault("storage", {})[kind] = asdict(s)
            _print(report.storage_section({"storage": {kind: results["storage"][kind]}}))
            lap(f"storage/{kind}")
        if "recovery" in sections:
            from bench.recovery import run_recovery

            with db(kind, "helix_bench_recovery") as url:
                rec = run_recovery(url, repeats=args.recovery_repeats)
            keys = rec.samples[0].keys() if rec.samples else []
            results.setdefault("recovery", {})[kind] = {
                "median": {k: rec.median(k) for k in keys},
                "launch_phases": rec.launch_phases,
                "all_ok": rec.all_ok,
                "repeats": len(rec.samples),
                "samples": rec.samples,
            }
            _print(report.recovery_section({"recovery": {kind: results["recovery"][kind]}}))
            lap(f"recovery/{kind}")
        if "concurrency" in sections:
            sessions = args.sessions if kind == "postgres" else args.sqlite_sessions
            if sessions > 0:
                from bench.concurrency import run_one_process

                with db(kind, "helix_bench_conc1") as url:
                    batches = run_one_process(url, sessions)
                summaries = [b.summary() for b in batches]
                results.setdefault("concurrency", {}).setdefault("one_process", {})[kind] = summaries
                _print(report.concurrency_section({"concurrency": {"one_process": {kind: results["concurrency"]["one_process"][kind]}}}))
                lap(f"concurrency one process/{kind}")

        if "idle" in sections:
            from bench.idle import run_idle

            with db(kind, "helix_bench_idle") as url, db(kind, "helix_bench_idle_bare") as bare_url:
                results.setdefault("idle", {})[kind] = run_idle(url, bare_url, args.idle_seconds)
            _print(report.idle_section({"idle": {kind: results["idle"][kind]}}))
            lap(f"idle/{kind}")
        if "takeover" in sections and args.kills > 0:
            import tempfile
            from pathlib import Path

            from bench.takeover import measure as measure_takeover

            from helix_dbos.ledger.migrate import upgrade

            with db(kind, "helix_bench_takeover") as url, tempfile.TemporaryDirectory() as work:
                upgrade(url)
                results.setdefault("takeover", {})[kind] = measure_takeover(url, args.kills, TAKEOVER_AFTER, Path(work))
            _print(report.takeover_section({"takeover": {kind: results["takeover"][kind]}}))
            lap(f"takeover/{kind}")

    if "concurrency" in sections and "postgres" in dbs and args.workers > 0:
        from bench.concurrency import run_two_workers

        with db("postgres", "helix_bench_conc2") as url:
            batches = run_two_workers(url, args.sessions, args.workers)
        results.setdefault("concurrency", {}).setdefault("two_workers", {})["postgres"] = [b.summary() for b in batches]
        _print(report.concurrency_section({"concurrency": {"two_workers": results["concurrency"]["two_workers"]}}))
        lap("concurrency two workers/postgres")

    if "scale" in sections and "postgres" in dbs:
        from bench.report import scale_section
        from bench.scale import SHAPES as SCALE_SHAPES
        from bench.scale import run_scale

        shapes = tuple(s.strip() for s in args.scale_shapes.split(",") if s.strip())
        if set(shapes) - set(SCALE_SHAPES):
            p.error(f"unknown scale shapes {sorted(set(shapes) - set(SCALE_SHAPES))}")
        if args.scale_sessions > 0:
            with db("postgres", "helix_bench_scale") as url:
                results["scale"] = run_scale(url, args.scale_sessions, tuple(int(w) for w in args.scale_workers.split(",") if w.strip()),
                                             shapes=shapes, limits=args.scale_limits, repeats=args.scale_repeats)
            if args.json:  # the batches so far survive a large batch that never ends
                with open(args.json + ".partial", "w") as f:
                    json.dump({"results": results}, f, indent=1, default=str)
        if args.scale_big > 0:
            from bench.scale import run_big

            big_shapes = tuple(s.strip() for s in args.scale_big_shapes.split(",") if s.strip())
            with db("postgres", "helix_bench_scale_big") as url:
                results.setdefault("scale", {})["big"] = run_big(url, args.scale_big, args.scale_big_workers, big_shapes,
                                                                 concurrency=args.scale_big_concurrency)
        _print(scale_section(results))
        lap("scale/postgres")

    if "imports" in sections:
        from bench.imports import run_imports

        results["imports"] = run_imports()
        _print(report.imports_section(results))
        lap("imports")

    meta = {
        "machine": machine,
        "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "elapsed_s": time.time() - started,
        "n": args.n,
        "warmup": args.warmup,
        "timings": timings,
        "dbs": dbs,
    }
    _print(report.summary_section(results))
    _print(report.issue25_table(results))
    _print(f"\n(total {meta['elapsed_s']:.0f} s)")
    if args.out:
        report.write(args.out, report.generated(results, meta), PREAMBLE)
        _print(f"wrote {args.out}")
    if args.check and not _all_ok(results):
        _print("CHECK FAILED: a runner answered wrong or a run did not complete")
        return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    return 0


def _all_ok(results: dict[str, Any]) -> bool:
    """Every probe answered right, every recovered run completed, every concurrent run was ok."""
    ok = all(p["answer_ok"] for r in results.get("overhead", {}).values() for p in r["probe"].values())
    ok &= all(r["all_ok"] for r in results.get("recovery", {}).values())
    for mode in results.get("concurrency", {}).values():
        ok &= all(b["ok"] == b["sessions"] for batches in mode.values() for b in batches)
    scale = results.get("scale", {})
    ok &= all(b["ok"] == b["sessions"] and b.get("answer_ok", True) is not False for batches in scale.get("batches", {}).values() for b in batches)
    ok &= all(b["ok"] == b["sessions"] and b.get("answer_ok", True) is not False for b in scale.get("big", {}).get("batches", []))
    lim = scale.get("limits")
    if lim:
        ok &= lim["capped"]["completed"] == lim["capped"]["sessions"] and lim["rated"]["completed"] == lim["rated"]["sessions"]
    return bool(ok)


if __name__ == "__main__":
    sys.exit(main())
