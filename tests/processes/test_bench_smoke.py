"""Smoke test of the benchmark command (tiny sizes, SQLite only): it runs and its runners agree.

Speed is never asserted here; `python -m bench` measures it as ratios in one run (docs/benchmarks.md).
This only keeps the bench from rotting while the runtime changes under it.
"""

from __future__ import annotations

import subprocess
import time
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_on_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    proc = subprocess.run(
        [
            sys.executable, "-m", "bench", "--db", "sqlite", "--sections", "overhead,storage,takeover", "--kills", "1",
            "-n", "1", "--warmup", "0", "--storage-steps", "10", "--idle-seconds", "0.2",
            "--sqlite-dir", str(tmp_path), "--out", str(out), "--check",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    assert "helix_dbos" in text and "answer OK" in text and "WRONG" not in text
    # the OpenAI Agents SDK pair (installed by the test extra) ran beside them, each answering right
    assert "| dbos_openai_agents |" in text and "| helix_openai_agents |" in text and "helix_openai_agents / dbos_openai_agents" in text
    assert "Overhead targets: before and now" in text and "Worker loss" in text


def test_cost_section_renders_wal_and_postgres_cpu() -> None:
    """The cost section shows `bench.walcount`'s figures (WAL, Postgres CPU, executor time, sequential
    scans) beside the counts, and says why when the server could not give them."""
    from bench.report import cost_section, wal_section

    unit = {"tx": 1.0, "stmts": 2.0, "rtt": 4.0, "checkouts": 0.0}
    figs = {name: {"units": {"run (5x3 workload)": unit}, "by_engine_step3": {}, "by_table_step3": {}, "deterministic": True}
            for name in ("bare_dbos", "pydantic_ai_dbos", "helix_dbos")}
    w = {"runs": 5, "wal_bytes_per_run": 98906, "by_relation_per_run": {"helix.events": 17909, "(full-page images)": 10},
         "updates_per_run": {"helix.sessions": {"upd": 44.0, "hot": 43.4}}, "seq_scans_per_run": {"helix.sessions": {"scans": 1.0, "rows": 6.0}},
         "pg_cpu_ms_per_run": 28.0,
         "statements_per_run": [{"query": "(all)", "calls": 264.2, "exec_ms": 14.2, "wal_bytes": 98962},
                                {"query": "SELECT a || b FROM helix.sessions", "calls": 15.0, "exec_ms": 1.3, "wal_bytes": 13035}]}
    text = cost_section({"cost": {"postgres": figs}, "wal": {"postgres": {"bare_dbos": w, "helix_dbos": w}}})
    assert "| helix_dbos | 98.9 | 28.0 | 14.2 | 264.2 | 1 (6 rows) | helix.events 17.9 | sessions 44 (43.4) |" in text
    assert "`SELECT a // b FROM helix.sessions`" in text  # a pipe would break the table
    assert wal_section({"error": "permission denied to create extension"}).startswith("WAL per run: not measured (permission denied")


def test_scale_section_runs_every_shape_side_by_side(pg_url: str) -> None:
    """The scale section's four shapes (plain DBOS steps, the pydantic-ai loop on DBOS, Pydantic AI's
    DBOSAgent, helix) each serve a tiny batch from their own worker process, answer right, and get
    every cost figure, which the report sets side by side."""
    import sqlalchemy as sa

    from bench.report import scale_section
    from bench.scale import SHAPES, run_scale

    url = sa.make_url(pg_url).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    out = run_scale(url, sessions=6, worker_counts=(1,), limits=False, timeout=180, repeats=2)
    batches = out["batches"]["1"]
    # the second round runs the targets' two sides again, on fresh workers; the first is the side-by-side one
    rounds = out["repeats"]["1"]
    assert len(rounds) == 2 and rounds[0]["helix"] is next(b for b in batches if b["shape"] == "helix")
    assert sorted(rounds[1]) == ["bare", "helix"] and all(b["ok"] == 6 and b["answer_ok"] for b in rounds[1].values())
    assert [b["shape"] for b in batches] == list(SHAPES)
    for b in batches:
        assert b["ok"] == 6 and b["answer_ok"], b
        # each shape's worker opened its pools before the batch: a batch of 6 opens few backends, but counts them
        assert b["backends_opened"] is not None and b["backends_opened"] >= 0
        assert b["peak_conns"].get("worker", 0) >= 1 and b["peak_conns_total"] >= b["peak_conns"]["worker"]
        assert b["wal_server_bytes"] > 0 and b["worker_cpu_s"] > 0
        assert b["wal_db_bytes"] is None or b["wal_db_bytes"] > 0
    # each batch in a database of its own, dropped after it: no batch inherits another's rows
    names = [b["database"] for b in batches] + [b["database"] for b in rounds[1].values()]
    assert len(set(names)) == len(names) == len(SHAPES) + 2
    with sa.create_engine(url, poolclass=sa.pool.NullPool).connect() as conn:
        left = conn.execute(sa.text("SELECT datname FROM pg_database WHERE datname = ANY(:n)"), {"n": names}).scalars().all()
    assert left == []
    text = scale_section({"scale": out})
    assert "| figure | helix / floor | helix / bare | helix / peer |" in text
    assert "floor_dbos_steps, 1 worker(s)" in text and "peer_pydantic_ai_dbosagent, 1 worker(s)" in text and "WRONG" not in text
    assert "**1 worker(s): bare and helix, 2 rounds**" in text


def _batch(shape: str, wall: float, worker_s: float, pg_s: float) -> dict[str, object]:
    return {"shape": shape, "runner": f"{shape}_x", "sessions": 100, "total_s": wall, "worker_cpu_s": worker_s, "front_cpu_s": 0.0,
            "pg_cpu_server_s": pg_s}


def test_the_targets_read_the_median_of_the_rounds() -> None:
    """With ``--scale-repeats``, the targets judge helix / bare by the median of the rounds' ratios,
    not by the first round: here the first round alone would miss the wall target (1.30x), the
    median of 1.30x, 1.10x and 1.15x meets it; each round is listed with its ratios."""
    from bench.report import cost_targets_table, repeats_section

    rounds = [
        {"bare": _batch("bare", 100.0, 10.0, 1.0), "helix": _batch("helix", 130.0, 12.0, 2.0)},
        {"bare": _batch("bare", 100.0, 10.0, 1.0), "helix": _batch("helix", 110.0, 11.0, 1.4)},
        {"bare": _batch("bare", 100.0, 10.0, 1.0), "helix": _batch("helix", 115.0, 13.0, 1.6)},
    ]
    results = {"scale": {"batches": {"2": [rounds[0]["bare"], rounds[0]["helix"]]}, "repeats": {"2": rounds}}}
    table = cost_targets_table(results)
    assert "| 2 worker(s), 100 sessions: wall, helix / pydantic-ai loop on bare DBOS | 1.30x (130.0 s / 100.0 s) | <= 1.2x (goal 1.0) | no |" in table.replace("(goal 1.0x)", "(goal 1.0)")
    assert "wall, helix / pydantic-ai loop on bare DBOS, median of 3 rounds | 1.15x (rounds: 1.30x, 1.10x, 1.15x) |" in table
    # CPU per run: (12+2)/(10+1), (11+1.4)/11, (13+1.6)/11 -> 1.27x, 1.13x, 1.33x; median 1.27x: missed
    assert "CPU per run (workers + Postgres + front), helix / pydantic-ai loop on bare DBOS, median of 3 rounds | 1.27x" in table
    assert table.split("median of 3 rounds | 1.27x")[1].split("\n")[0].endswith("| no |")
    assert "Postgres CPU per run (server, exact), helix / pydantic-ai loop on bare DBOS, median of 3 rounds | 1.60x (rounds: 2.00x, 1.40x, 1.60x)" in table
    listed = repeats_section(results)
    assert "| 1 | 100.0 / 130.0 | 110.0 / 140.0 | 10.0 / 20.0 | 1.30x | 1.27x | 2.00x |" in listed
    assert "| median |  |  |  | **1.15x** | **1.27x** | **1.60x** |" in listed
    # one round: no medians, no repeats table
    assert "median of" not in cost_targets_table({"scale": {"batches": results["scale"]["batches"]}})


def test_watch_counts_a_backend_that_lived_between_two_samples(pg_url: str) -> None:
    """A connection that opens, runs a statement and closes between two samples is still counted
    among the batch's backends (the database's session counter), and the sampler says it missed it."""
    import os

    import sqlalchemy as sa

    from bench.pgwatch import PgWatch

    url = sa.make_url(pg_url).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    watch = PgWatch(url, {os.getpid(): "front"}, every=600, wal_by_db=False)
    brief = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with brief.connect() as conn:
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    brief.dispose()
    # the server ends a backend a moment after its client leaves: wait until it is gone, so the
    # last sample cannot see it either way (it lived between two samples)
    # (asked from another database: a session here would be counted among the batch's)
    probe = sa.create_engine(sa.make_url(url).set(database="postgres"), poolclass=sa.pool.NullPool)
    deadline = time.monotonic() + 60
    with probe.connect() as conn:
        while conn.execute(sa.text("SELECT 1 FROM pg_stat_activity WHERE pid = :p"), {"p": pid}).first():
            assert time.monotonic() < deadline, f"backend {pid} still listed after 60 s"
            time.sleep(0.05)
            conn.rollback()  # a fresh snapshot of pg_stat_activity each time
    probe.dispose()
    watch.stop_sampling()
    out = watch.finish()
    assert out["backends_opened"] == 1 and out["backends_seen"] == 0, out
