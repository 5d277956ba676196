"""Section 5: recovery latency, from relaunch to the crashed run at rest, with real processes.

Each repetition: a child process runs the workload with `HELIX_DBOS_CRASH_AT=before_body:<tool>`
and dies by `os._exit` after the attempt of that body committed and before the body ran (exit
97); then a fresh process with the same executor id is spawned (`wake`), and the parent splits its
time into interpreter start, imports, `runtime.launch()` and recovery until the run is at rest.
From the ledger: when the crashed call's second attempt started (recovery reached it) and when the
run ended (the rest of the run: 4 more steps and the answer).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
CRASH_EXIT = 97


@dataclass
class RecoveryResult:
    crash_at: str
    samples: list[dict[str, float]] = field(default_factory=list)
    launch_phases: dict[str, float] = field(default_factory=dict)  # median seconds
    all_ok: bool = True
    notes: list[str] = field(default_factory=list)

    def median(self, key: str) -> float:
        return statistics.median(s[key] for s in self.samples) if self.samples else float("nan")


def _env(crash_at: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_DBOS_", "DBOS__"))}
    if crash_at:
        env["HELIX_DBOS_CRASH_AT"] = crash_at
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _spawn(url: str, executor: str, session: str, cmd: str, crash_at: str | None) -> tuple[subprocess.CompletedProcess[str], float, float]:
    args = [sys.executable, "-m", "bench.crash_app", "--db", url, "--executor", executor, "--session", session, cmd]
    t_spawn = time.time()
    proc = subprocess.run(args, cwd=ROOT, env=_env(crash_at), capture_output=True, text=True, timeout=300, check=False)
    return proc, t_spawn, time.time()


def _ledger_times(url: str, session: str, tool: str) -> dict[str, float]:
    """Epoch seconds: the crashed call's re-run start (attempt 2) and the run's end."""
    sqlite = url.startswith("sqlite")
    prefix = "" if sqlite else "helix."
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rerun = conn.execute(
                sa.text(
                    f"SELECT a.started_at FROM {prefix}attempts a JOIN {prefix}calls c ON c.dispatch_id = a.dispatch_id "
                    f"WHERE c.session_id = :s AND c.tool_name = :t AND c.step = 0 AND a.attempt = 2"
                ),
                {"s": session, "t": tool},
            ).scalar()
            ended = conn.execute(sa.text(f"SELECT max(ended_at) FROM {prefix}runs WHERE session_id = :s"), {"s": session}).scalar()
    finally:
        engine.dispose()

    def epoch(value: Any) -> float:
        if value is None:
            return float("nan")
        if isinstance(value, str):
            from datetime import datetime

            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            from datetime import UTC

            value = value.replace(tzinfo=UTC)
        return value.timestamp()

    return {"rerun": epoch(rerun), "ended": epoch(ended)}


def run_recovery(url: str, repeats: int = 3, tool: str = "score") -> RecoveryResult:
    crash_at = f"before_body:{tool}"
    out = RecoveryResult(crash_at)
    phase_samples: dict[str, list[float]] = {}
    for rep in range(repeats):
        executor = f"bench-crash-{uuid.uuid4().hex[:8]}"
        session = uuid.uuid4().hex
        crashed, _, _ = _spawn(url, executor, session, "start", crash_at)
        if crashed.returncode != CRASH_EXIT:
            raise RuntimeError(f"expected the child to crash at {crash_at} (exit {CRASH_EXIT}), got {crashed.returncode}: {crashed.stderr[-2000:]}")
        woke, t_spawn, t_exit = _spawn(url, executor, session, "wake", None)
        line = next((l_ for l_ in woke.stdout.splitlines() if l_.startswith("{")), None)
        if woke.returncode != 0 or line is None:
            raise RuntimeError(f"relaunch failed (exit {woke.returncode}): {woke.stderr[-3000:]}")
        data = json.loads(line)
        ledger = _ledger_times(url, session, tool)
        ok = data["status"] == "completed" and data["answer_ok"]
        out.all_ok &= ok
        out.samples.append(
            {
                "interpreter": data["t0"] - t_spawn,
                "imports": data["t1"] - data["t0"],
                "launch": data["t2"] - data["t1"],
                "launch_to_rest": data["t3"] - data["t2"],
                "from_launch": data["t3"] - data["t1"],  # the figure: launch() to the run at rest
                "total": data["t3"] - t_spawn,
                "to_rerun": ledger["rerun"] - t_spawn,
                "rerun_to_end": ledger["ended"] - ledger["rerun"],
                "shutdown_exit": t_exit - data["t3"],
            }
        )
        for k, v in data["phases"].items():
            phase_samples.setdefault(k, []).append(v)
    out.launch_phases = {k: statistics.median(v) for k, v in phase_samples.items()}
    return out
