"""Stopping or cancelling a run whose executor was SIGKILLed mid-body.

The unsafe body started (its attempt committed) and its process died before any result was
written: it may have taken effect. Whoever settles the run afterwards (its executor's relaunch, or
the session's next entry) answers it ``outcome_unknown``, under a stop and a DBOS cancel as under
every other entry; ``run_stopped`` ("stopped before it finished; not completed") is only for calls
whose body never started.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helix_dbos.recovery import OUTCOME_UNKNOWN, RUN_STOPPED
from tests.support.crashkit import Kit, helix_table, query, transcript_problems
from tests.support.procs import SETTINGS_VARS, child_env, run_python_m
from tests.processes.test_dbos_operator import dbos_cli, workflow
from tests.support.waiting import wait_for
def _killed_mid_body(kit: Kit) -> str:
    """The app, SIGKILLed while its unsafe body (and nothing after it) runs: the run id."""
    proc = kit.spawn("start", extra_env={"SCENARIO_DELAY": "30"})
    try:
        wait_for("the unsafe body to start", lambda: kit.bodies()["slow_seq_unsafe"] == 1 or proc.poll() is not None, timeout=120)
    finally:
        proc.kill()
        proc.wait(30)
    return str(query(kit.db_url, f"SELECT current_run_id FROM {helix_table(kit.db_url, 'sessions')} WHERE session_id = :s", s=kit.session)[0]["current_run_id"])


def _stop_by_cli(kit: Kit) -> None:
    """``helix-dbos stop --kind abort``, as an operator runs it (its own runtime, another executor)."""
    env = child_env(SETTINGS_VARS, {"HELIX_DBOS_APP": "tests.scenarios.app:cli_runtime", "SCENARIO": kit.scenario,
                                    "SCENARIO_EFFECTS": str(kit.workdir / "effects")})
    out = run_python_m([sys.executable, "-m", "helix_dbos.cli", "stop", kit.session, "--kind", "abort", "--timeout", "1", "--db", kit.db_url, "--json"],
                       env, timeout=120)  # forked from the worker's fork server: the CLI's start is not what is tested
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]


@pytest.mark.kills
@pytest.mark.parametrize("how", ["cancel-then-wake", "cancel-then-entry", "stop-then-wake"])
def test_a_started_lost_call_of_a_dead_run_is_outcome_unknown_when_stopped(db_url: str, tmp_path: Path, how: str) -> None:
    kit = Kit(db_url, tmp_path, scenario="slow_one_then_seq")  # an unsafe body, then seq_b behind it (never started)
    run_id = _killed_mid_body(kit)
    if how.startswith("cancel"):
        dbos_cli(db_url, "cancel", run_id)
    else:
        _stop_by_cli(kit)
    out = kit.entry("retry") if how.endswith("entry") else kit.wake()
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]

    run = query(db_url, f"SELECT status, error_code FROM {helix_table(db_url, 'runs')} WHERE run_id = :r", r=run_id)[0]
    assert (run["status"], run["error_code"]) == ("failed", "run_stopped"), run
    calls = {c["tool"]: c for c in out.result["calls"] if c["step"] == 0}
    assert calls["slow_seq_unsafe"]["status"] == "outcome_unknown" and calls["slow_seq_unsafe"]["note"] == OUTCOME_UNKNOWN, calls
    assert calls["seq_b"]["status"] == "run_stopped" and calls["seq_b"]["note"] == RUN_STOPPED, calls  # never started
    attempts = query(db_url, f"SELECT outcome FROM {helix_table(db_url, 'attempts')} WHERE dispatch_id = :d", d=calls["slow_seq_unsafe"]["dispatch_id"])
    assert [a["outcome"] for a in attempts] == ["lost"], attempts  # closed, never left open
    assert kit.bodies() == {"slow_seq_unsafe": 1}, "a body ran again"
    assert kit.model_steps()[0] == 1, "the saved step was asked for again"
    if how.startswith("cancel"):
        assert workflow(db_url, run_id)["status"] == "CANCELLED"  # type: ignore[index]
    assert transcript_problems(db_url, kit.session) == []
