"""A second Ctrl-C (or SIGTERM) while the first one's shutdown is under way.

An operator who presses Ctrl-C twice, or a supervisor that sends SIGTERM and then SIGINT, must not
strand a run: whatever number of signals arrive, at whatever moment, the process leaves the run
recoverable by its relaunch (DBOS ``PENDING``, or ended with the ledger at rest), never DBOS
``ERROR`` with the ledger ``running``. Real signals to a real script process (``runtime.shutdown()``
in a ``finally``, as ``with hx.Runtime(...)`` does), then a relaunch with the same executor id.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from helix_dbos.recovery import OUTCOME_UNKNOWN
from tests.support.crashkit import Kit, transcript_problems
from tests.processes.test_signals import statuses
from tests.support.waiting import wait_for

#: (first, second, ...) signals; the gaps between them are drawn per test (0.7-2 s, as an impatient operator's).
SEQUENCES = {
    "INT-INT": (signal.SIGINT, signal.SIGINT),
    "INT-TERM": (signal.SIGINT, signal.SIGTERM),
    "TERM-INT": (signal.SIGTERM, signal.SIGINT),
    "INT-INT-INT": (signal.SIGINT, signal.SIGINT, signal.SIGINT),
}


@pytest.mark.kills
@pytest.mark.parametrize("name", list(SEQUENCES))
def test_repeated_signals_during_bodies_leave_the_run_recoverable(db_url: str, tmp_path: Path, name: str) -> None:
    sigs = SEQUENCES[name]
    rng = random.Random()
    k = Kit(db_url, tmp_path, scenario="slow_pair")
    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": "5"})
    wait_for("both bodies to start", lambda: len(k.lines("bodies")) == 2 or proc.poll() is not None, timeout=120)
    time.sleep(rng.uniform(0.3, 1.0))
    gaps = []
    for i, sig in enumerate(sigs):
        if proc.poll() is not None:
            break
        if i:
            gaps.append(round(rng.uniform(0.7, 2.0), 2))
            time.sleep(gaps[-1])
        proc.send_signal(sig)
    wait_for(f"the process to exit after {name} (gaps {gaps})", lambda: proc.poll() is not None, timeout=60)
    stderr = "".join(p.read_text() for p in tmp_path.glob("spawn-*.stderr"))
    dbos, runs = statuses(db_url)
    assert "cannot schedule new futures" not in stderr, stderr[-3000:]
    # recoverable: DBOS still runs it (PENDING) or it ended with the ledger at rest; never ERROR
    assert (dbos, runs) in ((["PENDING"], ["running"]), (["SUCCESS"], ["completed"])), (dbos, runs, gaps, stderr[-3000:])

    result = k.wake(extra_env={"SCENARIO_DELAY": "0"}).result
    assert result is not None and result["status"] == "completed", (result, gaps)
    calls = {c["tool"]: c for c in result["calls"] if c["step"] == 0}
    assert calls["slow_safe"]["status"] == "ok"
    # the unsafe body ran once: it kept its result if it was written, else it is outcome_unknown
    assert k.bodies()["slow_unsafe"] == 1
    assert calls["slow_unsafe"]["status"] == "ok" or calls["slow_unsafe"]["note"] == OUTCOME_UNKNOWN, calls
    assert k.model_steps()[0] == 1  # the saved step was never asked for again
    assert transcript_problems(db_url, k.session) == []
    assert statuses(db_url) == (["SUCCESS"], ["completed"])
