"""Deps across processes: a run killed mid-body is recovered in a fresh process, which rebuilds the
run's deps with the registered factory from the JSON its start stored (both databases)."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE
from tests.support.crashkit import transcript_problems
from tests.support.procs import child_env, run_python_m
from tests.support.effects import read_effects


def _run(db_url: str, effects: Path, executor: str, cmd: str, session: str, crash_at: str | None = None, tool: str = "remember",
         output: bool = False) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env["DEPS_APP_TOOL"] = tool
    if output:
        env["DEPS_APP_OUTPUT"] = "1"
    env["SPANS_FILE"] = str(effects.parent / "spans.jsonl")
    if crash_at:
        env["HELIX_DBOS_CRASH_AT"] = crash_at
    args = [sys.executable, "-m", "tests.scenarios.deps_app", "--db", db_url, "--effects", str(effects), "--executor", executor, cmd, "--session", session]
    return run_python_m(args, env, timeout=240)


def _call_row(db_url: str, dispatch_id: str) -> dict[str, Any]:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return dict(conn.execute(sa.select(t.calls).where(t.calls.c.dispatch_id == dispatch_id)).mappings().one())
    finally:
        engine.dispose()


@pytest.mark.kills
def test_recovered_run_rebuilds_its_deps_in_a_fresh_process(db_url: str, tmp_path: Path) -> None:
    """``remember`` says ``replay="unsafe"`` in its metadata; the app's ``tool_policies`` mapping
    overrides it to safe (with a concurrency group), so after the kill it runs again."""
    effects = tmp_path / "effects"
    executor, session = f"deps-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    crashed = _run(db_url, effects, executor, "start", session, crash_at="after_body:remember")
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr[-3000:]
    woke = _run(db_url, effects, executor, "wake", session)
    assert woke.returncode == 0, woke.stderr[-3000:]
    out = json.loads([ln for ln in woke.stdout.splitlines() if ln.startswith("{")][-1])

    assert out["status"] == "completed" and out["output"] == "done"
    deps = read_effects(effects, "deps")
    assert [d["data"] for d in deps] == [{"user": "ann", "quota": 3}] * 2  # built once in each process
    assert deps[0]["pid"] != deps[1]["pid"]
    bodies = read_effects(effects, "bodies")
    call = out["calls"][0]
    assert len(bodies) == 2 and bodies[0]["pid"] != bodies[1]["pid"]  # safe: it re-ran in the new process
    assert {b["user"] for b in bodies} == {"ann"} and {b["dispatch_id"] for b in bodies} == {call["dispatch_id"]}
    assert call["status"] == "ok" and call["attempts"] == 2 and call["result"]["user"] == "ann"
    row = _call_row(db_url, call["dispatch_id"])  # the mapping's policy is the one saved on the row
    assert (row["replay"], row["concurrency_group"], row["sequential"]) == ("safe", "notes", False)
    model = read_effects(effects, "model")
    assert [m["step"] for m in model] == [0, 1]  # the saved reply was not asked again
    assert {m["instructions"] for m in model} == {"ann has 3 notes left."}  # dynamic instructions, from deps
    assert transcript_problems(db_url, session) == []


@pytest.mark.kills
def test_unsafe_pydantic_tool_killed_mid_body_is_answered_outcome_unknown(db_url: str, tmp_path: Path) -> None:
    """A plain ``@agent.tool`` (no policy anywhere: unsafe) killed after its body ran: never run
    again, the model is told outcome_unknown, and the recovered process still has its deps."""
    effects = tmp_path / "effects"
    executor, session = f"deps-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    crashed = _run(db_url, effects, executor, "start", session, crash_at="after_body:charge", tool="charge")
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr[-3000:]
    woke = _run(db_url, effects, executor, "wake", session, tool="charge")
    assert woke.returncode == 0, woke.stderr[-3000:]
    out = json.loads([ln for ln in woke.stdout.splitlines() if ln.startswith("{")][-1])
    assert out["status"] == "completed"
    assert [b["tool"] for b in read_effects(effects, "bodies")] == ["charge"]  # one body, ever
    call = out["calls"][0]
    assert (call["tool"], call["status"], call["attempts"]) == ("charge", "outcome_unknown", 1)
    model = read_effects(effects, "model")
    assert [m["step"] for m in model] == [0, 1]
    assert "outcome_unknown" in str(model[1]["seen"]["charge"])
    assert model[1]["instructions"] == "ann has 3 notes left."  # deps rebuilt in the new process
    assert transcript_problems(db_url, session) == []
    # one trace across both processes; the recovering process's body span carries the decision
    spans = read_effects(tmp_path, "spans")
    assert len({s["trace_id"] for s in spans}) == 1 and len({s["pid"] for s in spans}) == 2
    decided = [s["attributes"] for s in spans if s["name"] == "helix.body_attempt"]
    # the first process died inside its body span, which never ended: only the recovery's is exported
    assert [(d["helix.policy"], d["helix.decision"], d["helix.status"]) for d in decided] == [("unsafe", "done", "outcome_unknown")]
    assert {s["name"] for s in spans if s["pid"] == spans[0]["pid"]} >= {"helix.prepare", "helix.model_request", "helix.append"}
    # the trace's root: emitted once, whole, by the process that ended the run; every span's parent is exported
    (root,) = [s for s in spans if s["name"] == "helix.run"]
    assert root["pid"] != spans[0]["pid"] and root["parent_id"] is None and root["attributes"]["helix.status"] == "completed"
    assert all(s["parent_id"] == root["span_id"] for s in spans if s is not root)


@pytest.mark.kills
def test_reply_with_an_output_tool_killed_mid_body_completes_with_its_output(db_url: str, tmp_path: Path) -> None:
    """One reply carries an unsafe call and the output tool. Killed after the body ran, the run is
    recovered in a fresh process: the call is answered outcome_unknown (never run again), the model
    is not asked again, and the run completes with the output the saved reply gave. The output is
    the run's output, not a call: its row is kind ``finish`` with nothing to replay, no attempts."""
    effects = tmp_path / "effects"
    executor, session = f"deps-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    crashed = _run(db_url, effects, executor, "start", session, crash_at="after_body:charge", tool="charge", output=True)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr[-3000:]
    woke = _run(db_url, effects, executor, "wake", session, tool="charge", output=True)
    assert woke.returncode == 0, woke.stderr[-3000:]
    out = json.loads([ln for ln in woke.stdout.splitlines() if ln.startswith("{")][-1])
    assert out["status"] == "completed" and out["output"] == {"text": "noted"}
    assert [b["tool"] for b in read_effects(effects, "bodies")] == ["charge"]  # one body, ever
    assert [m["step"] for m in read_effects(effects, "model")] == [0]  # the saved reply was not asked again
    by_tool = {c["tool"]: c for c in out["calls"]}
    assert (by_tool["charge"]["status"], by_tool["charge"]["attempts"]) == ("outcome_unknown", 1)
    finish = by_tool["final_result"]
    assert (finish["status"], finish["attempts"], finish["result"]) == ("ok", 0, {"text": "noted"})
    row = _call_row(db_url, finish["dispatch_id"])
    assert (row["kind"], row["replay"], row["paired_by"]) == ("finish", "safe", "body")
    assert transcript_problems(db_url, session) == []
