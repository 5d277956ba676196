"""Smoke test of the benchmark command (tiny sizes, SQLite only): it runs and its runners agree.

Speed is never asserted here; `python -m bench` measures it as ratios in one run (docs/benchmarks.md).
This only keeps the bench from rotting while the runtime changes under it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    assert "Issue 11's figures" in text and "Worker loss" in text
