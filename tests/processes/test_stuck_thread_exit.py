"""``shutdown()`` and the process's exit are bounded whatever a check or a body does.

A synchronous reconcile check that loops for ever is answered ``outcome_unknown`` after its
``reconcile_timeout``; a synchronous body that never returns is cut off by the shutdown like any
body. Neither thread may keep the process alive: they run as daemon threads the exit does not wait
for (``helix_dbos/threads.py``). Real processes, timed from outside.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from helix_dbos.recovery import OUTCOME_UNKNOWN
from tests.support.crashkit import Kit, transcript_problems
from tests.processes.test_signals import statuses
from tests.support.waiting import wait_for

#: How long a process may take from its run's end (or its Ctrl-C) to its exit: generous for a loaded
#: machine, far below "never".
EXIT_BOUND = 30.0


@pytest.mark.kills
def test_a_check_that_never_returns_does_not_keep_the_process_alive(db_url: str, tmp_path: Path) -> None:
    k = Kit(db_url, tmp_path, scenario="reconcile")
    k.crash("after_body:rec_charge")  # the body ran; its result was never written: the check is asked
    began = time.monotonic()
    out = k.run("wake", extra_env={"SCENARIO_CHECK": "forever"}, timeout=120)
    took = time.monotonic() - began
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]
    assert out.result["status"] == "completed", out.result
    (call,) = [c for c in out.result["calls"] if c["tool"] == "rec_charge"]
    assert call["status"] == "outcome_unknown" and call["note"] == OUTCOME_UNKNOWN, call  # the check could not tell in time
    assert len(k.lines("checks")) == 1
    assert took < EXIT_BOUND + 30, f"the relaunch took {took:.1f} s: the stuck check held its exit"
    assert statuses(db_url) == (["SUCCESS"], ["completed"])
    assert transcript_problems(db_url, k.session) == []


@pytest.mark.kills
def test_a_body_that_never_returns_does_not_keep_the_process_alive(db_url: str, tmp_path: Path) -> None:
    k = Kit(db_url, tmp_path, scenario="stuck")
    proc = k.spawn("start")
    wait_for("the stuck body to start", lambda: k.bodies()["stuck_sync"] == 1 or proc.poll() is not None, timeout=120)
    proc.send_signal(signal.SIGINT)  # KeyboardInterrupt, then the app's runtime.shutdown()
    signalled = time.monotonic()
    wait_for("the process to exit with its body stuck", lambda: proc.poll() is not None, timeout=EXIT_BOUND)
    assert time.monotonic() - signalled < EXIT_BOUND
    assert statuses(db_url) == (["PENDING"], ["running"])  # recoverable, never ERROR

    woke = k.wake(extra_env={"SCENARIO_STUCK": "0"}).result
    assert woke is not None and woke["status"] == "completed", woke
    (call,) = woke["calls"][:1]
    assert call["status"] == "outcome_unknown" and call["note"] == OUTCOME_UNKNOWN, call  # unsafe, started, no result
    assert k.bodies()["stuck_sync"] == 1
    assert transcript_problems(db_url, k.session) == []


@pytest.mark.kills
def test_a_transactional_body_that_never_returns_does_not_keep_the_process_alive(db_url: str, tmp_path: Path) -> None:
    """The same for a transactional body, which runs inside its transaction on a worker thread: it
    ran on the loop's default executor, whose threads the exit joins, so the process never exited.

    On SQLite the stuck body holds the database's write lock: the shutdown closes its connection
    when its grace period ends (``transactional.abandon_open``), else DBOS's own writers (joined by
    its destroy) and the lease release each waited out SQLite's 30 s busy timeout (~50 s in all).
    The bound is the same on both databases.
    """
    k = Kit(db_url, tmp_path, scenario="stuck_tx")
    proc = k.spawn("start")
    try:
        wait_for("the stuck body to start", lambda: k.bodies()["stuck_tx"] == 1 or proc.poll() is not None, timeout=120)
        assert proc.poll() is None, "the process ended before its body got stuck"
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        bound = EXIT_BOUND
        wait_for("the process to exit with its transactional body stuck", lambda: proc.poll() is not None, timeout=bound)
        assert time.monotonic() - signalled < bound
    finally:
        if proc.poll() is None:  # the failure this test is about: a process that never exits is not left behind
            proc.kill()
            proc.wait(timeout=30)
    assert statuses(db_url) == (["PENDING"], ["running"])  # recoverable, never ERROR

    woke = k.wake(extra_env={"SCENARIO_STUCK": "0"}).result
    assert woke is not None and woke["status"] == "completed", woke
    (call,) = woke["calls"][:1]
    assert call["status"] == "ok", call  # its transaction never committed: no effect, so it ran again
    assert k.bodies()["stuck_tx"] == 2
    assert transcript_problems(db_url, k.session) == []
