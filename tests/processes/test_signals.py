"""Ctrl-C (SIGINT) and SIGTERM mid-body, to a script and to the service: the run stays recoverable.

DBOS's shutdown cancels the tasks on its event loop; before the fix a cancelled run became a DBOS
``ERROR`` workflow with its ledger run still ``running``, which no relaunch recovers. Here a real
process is signalled while a safe and an unsafe body run; DBOS must still say ``PENDING``, and the
relaunch with the same executor id must finish the run by the recovery rules: the safe body again
with the same dispatch id, the unsafe one ``outcome_unknown``, the saved step never asked again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.recovery import OUTCOME_UNKNOWN
from tests.support.crashkit import Kit, dbos_table, transcript_problems
from tests.support.familykit import Family
from tests.scenarios import family
from tests.processes.test_service import Service, Stream, alive, contiguous, read_sse, services  # noqa: F401  (fixture)
from tests.support.waiting import wait_for

SIGNALS = [signal.SIGINT, signal.SIGTERM]


def statuses(db_url: str, run_id: str | None = None) -> tuple[list[str], list[str]]:
    """DBOS's workflow statuses and the ledger's run statuses, read straight from the database."""
    table = dbos_table(db_url, "workflow_status")
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            where = "" if run_id is None else " WHERE workflow_uuid = :id"
            dbos = [str(r[0]) for r in conn.execute(sa.text(f"SELECT status FROM {table}{where}"), {"id": run_id})]
            runs = [str(r[0]) for r in conn.execute(sa.select(t.runs.c.status))]
    finally:
        engine.dispose()
    return dbos, runs


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_signal_mid_body_in_a_script_leaves_the_run_recoverable(db_url: str, tmp_path: Path, sig: int) -> None:
    k = Kit(db_url, tmp_path, scenario="slow_pair")
    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": "20"})
    wait_for("both bodies to start", lambda: len(k.lines("bodies")) == 2 or proc.poll() is not None)
    time.sleep(0.2)
    proc.send_signal(sig)
    proc.wait(30)  # SIGINT: KeyboardInterrupt, then the app's runtime.shutdown(); SIGTERM: gone at once
    assert proc.returncode != 0
    dbos, runs = statuses(db_url)
    assert dbos == ["PENDING"], dbos  # never ERROR: DBOS recovers only PENDING workflows
    assert runs == ["running"]
    first = {line["tool"]: line["dispatch_id"] for line in k.lines("bodies")}

    result = k.wake(extra_env={"SCENARIO_DELAY": "0"}).result
    assert result is not None and result["status"] == "completed", result
    calls = {c["tool"]: c for c in result["calls"] if c["step"] == 0}
    assert calls["slow_safe"]["status"] == "ok" and calls["slow_safe"]["attempts"] == 2
    assert calls["slow_unsafe"]["status"] == "outcome_unknown" and calls["slow_unsafe"]["note"] == OUTCOME_UNKNOWN
    assert k.bodies() == {"slow_safe": 2, "slow_unsafe": 1}
    again = [line for line in k.lines("bodies") if line["tool"] == "slow_safe"]
    assert {line["dispatch_id"] for line in again} == {first["slow_safe"]}  # the same dispatch id both times
    assert k.model_steps()[0] == 1  # the saved step was not asked for again
    assert transcript_problems(db_url, k.session) == []
    assert statuses(db_url) == (["SUCCESS"], ["completed"])


def test_a_script_that_never_calls_shutdown_leaves_no_pending_workflow(db_url: str, tmp_path: Path) -> None:
    """``result(timeout=...)`` returns at ledger rest, a moment before DBOS ends the workflow; the
    process exit must not strand it PENDING (DBOS's worker threads finish it before the exit)."""
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "import helix_dbos as hx\n"
        "from pydantic_ai.models.test import TestModel\n"
        "rt = hx.Runtime([hx.Agent('a', TestModel(custom_output_text='hi'))], database_url=sys.argv[1], executor_id=sys.argv[2]).launch()\n"
        "print(rt.start('a', 'go').result(timeout=120).status)\n"
    )
    out = subprocess.run([sys.executable, str(script), db_url, f"noshut-{uuid.uuid4().hex[:6]}"], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0 and out.stdout.strip().endswith("completed"), out.stderr[-2000:]
    assert statuses(db_url) == (["SUCCESS"], ["completed"])


@pytest.mark.parametrize(
    ("sig", "via_dbos"), [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)], ids=["SIGINT", "SIGTERM", "SIGINT-dbos-start"]
)
def test_signal_to_the_service_mid_body_then_restart_finishes_the_run(
    db_url: str, tmp_path: Path, services: Callable[..., Service], sig: int, via_dbos: bool
) -> None:
    """SIGINT / SIGTERM to the uvicorn process (or to ``dbos start``, which forwards it) while an
    unsafe and a safe body run: the live SSE stream ends (cut, resumable) instead of hanging, and
    the restart with the same executor id finishes the same run."""
    executor = f"svc-sig-{uuid.uuid4().hex[:6]}"
    effects = tmp_path / "effects.jsonl"
    slow = {"HELIX_DBOS_DEMO_EFFECTS": str(effects), "HELIX_DBOS_DEMO_SLOW": "30", "HELIX_DBOS_DEMO_EMAIL_SEC": "30"}
    service = services(executor, extra_env=slow, via_dbos=via_dbos)
    with service.client() as http:
        run = http.post("/sessions", json={"agent": "errands", "message": "the usual"}).json()
    sid, run_id = run["session_id"], run["run_id"]

    both_running = threading.Event()
    received: list[Stream] = []
    started: set[str] = set()

    def watch(event: dict[str, Any]) -> None:
        if event["type"] == "tool_start":
            started.add(event["data"]["tool_name"] + str(event["data"]["args"].get("seat", "")))
        if {"send_email", "reserve_seatA2"} <= started:
            both_running.set()

    reader = threading.Thread(target=lambda: received.append(read_sse(service.base, sid, on_event=watch, timeout=120)), daemon=True)
    reader.start()
    assert both_running.wait(60), service.output()
    time.sleep(0.2)
    signalled = time.monotonic()
    service.proc.send_signal(sig)
    service.proc.wait(30)
    wait_for("the service's processes to exit", lambda: not any(alive(pid) for pid in service.tree))  # dbos start exits first
    reader.join(30)
    assert not reader.is_alive(), "the SSE stream hung after the service stopped"
    assert time.monotonic() - signalled < 20
    [before] = received
    assert before.end is None or before.end["status"] not in ("completed",), before
    assert contiguous(before.seqs) and before.seqs
    dbos, runs = statuses(db_url, run_id)
    assert dbos == ["PENDING"], (dbos, service.output())
    assert runs == ["running"]

    restarted = services(executor, extra_env={"HELIX_DBOS_DEMO_EFFECTS": str(effects)})
    after = read_sse(restarted.base, sid, before.seqs[-1])
    assert after.end is not None and after.end["status"] == "completed", (after, restarted.output())
    assert contiguous(before.seqs + after.seqs)
    paired = [e["data"] for e in after.events if e["type"] == "call_paired"]
    assert [(p["tool_name"], p["status"]) for p in paired] == [("send_email", "outcome_unknown")]
    with restarted.client() as http:
        view = http.get(f"/sessions/{sid}").json()
    by_name = {c["args"].get("seat", c["tool_name"]): c for c in view["calls"]}
    assert by_name["A2"]["status"] == "ok" and [a["outcome"] for a in by_name["A2"]["attempts"]] == ["lost", "ok"]  # closed, never left open
    assert by_name["send_email"]["status"] == "outcome_unknown" and len(by_name["send_email"]["attempts"]) == 1
    assert [r["status"] for r in view["runs"]] == ["completed"]  # the same run, recovered
    bodies = [json.loads(line)["tool"] for line in effects.read_text().splitlines()]
    assert bodies.count("send_email") == 1
    assert statuses(db_url, run_id)[0] == ["SUCCESS"]


def test_shutdown_leaves_an_idle_companion_pending_for_the_next_turn(make_runtime: Any, fam: Family) -> None:
    """A companion waits between turns as a live workflow; the parent process's ``runtime.shutdown()``
    cancels it, and it must stay PENDING (not ERROR) so the relaunch serves the next turn with it.
    (A guard: DBOS runs a dequeued workflow as a task whose cancellation records nothing, so this
    held before the fix too; the run workflow started from a thread is the one that failed.)"""
    sid = uuid.uuid4().hex
    first = fam.ok("start", "--agent", "pal_boss", "--message", "one", "--session", sid)  # then rt.shutdown()
    assert first["status"] == "completed", first
    (comp,) = fam.rows(t.companions, t.companions.c.parent_session_id == sid)
    (wf,) = fam.dbos_workflows(comp["workflow_id"])
    assert wf["status"] in ("PENDING", "ENQUEUED"), wf["status"]  # never ERROR: its next launch resumes it

    rt = make_runtime(family.AGENTS, executor_id=fam.parent_executor)  # the relaunch
    second = rt.start("pal_boss", "two", session_id=sid).result(timeout=60)
    assert second.status == "completed" and "pal turn 2: two (remembers one)" in (second.output or ""), second
    (comp,) = fam.rows(t.companions, t.companions.c.parent_session_id == sid)
    assert comp["incarnation"] == 1 and comp["status"] == "live"  # the same companion workflow served it
