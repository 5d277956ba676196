"""One scenario mixing safe, unsafe, grouped, sequential, transactional and reconciled calls, crashed
at every fault point in turn, with the agent as an ``hx.Agent`` and as an OpenAI Agents SDK agent.

Invariants after the relaunch: unsafe bodies <= 1, safe bodies <= 3, every call answered exactly
once, a transcript a provider accepts, and the saved step never sent to the model again; the
transactional call's row in its own table exactly once and answered ok, the reconciled call's
outside effect exactly once and answered ok with it. The soak (``pytest -m soak``) does the same
with random points and random SIGKILLs, SIGINTs and SIGTERMs (one, or a second 0.05-2 s after the
first), ``dbos workflow cancel`` at random moments (it lands, or comes after the run's end: never a
mix), and on Postgres random connection cuts (``tests/tcpproxy.py``) that the run must ride out with
every body run exactly once.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helix_dbos.ledger.engine import is_sqlite
from helix_dbos.ledger.statuses import CALL_SETTLED
from helix_dbos.runtime.process.faults import STEP_CRASH_POINTS
from tests.scenarios.app import RAW_ROGUES, SCENARIOS
from tests.support.crashkit import Kit, helix_table, query, transcript_problems
from tests.support.tcpproxy import TcpProxy
from tests.processes.test_txtools import tx_rows

UNSAFE = {"unsafe_send", "group_unsafe", "seq_unsafe", "slow_unsafe", "slow_seq_unsafe"}
RECONCILED = {"rec_charge", "rec_seq"}
#: Decided by the database: each committed its effect with its result exactly once (asserted by rows).
TRANSACTIONAL = {"tx_book", "tx_rogue", "tx_escape"}
#: Commits its transaction itself (through the driver): its effect once, the call ``outcome_unknown``.
ESCAPING = {"tx_escape"}


def check_invariants(k: Kit, result: dict[str, Any], cut: bool = False) -> None:
    """``cut``: the store dropped connections in this round (no crash)."""
    assert result["status"] == "completed", result
    bodies = k.bodies()
    checks = _checks_that_found_nothing(k)
    for tool, n in bodies.items():
        if tool in RECONCILED:
            # a crash between the body's start and the outside charge leaves nothing applied: the check
            # says NotApplied and the body runs again, so every body past the first follows such a check
            assert n <= min(3, 1 + checks[tool]), (tool, n, checks)
        else:
            assert n <= (1 if tool in UNSAFE else 3), (tool, n)
    step0 = [c for c in result["calls"] if c["step"] == 0]
    assert all(c["status"] in CALL_SETTLED for c in result["calls"]), result["calls"]
    for c in step0:
        if cut and c["tool"] in TRANSACTIONAL:  # a try whose transaction the store dropped committed nothing
            continue  # and is tried again under the same attempt (docs/writing-tools.md): one row, below
        assert c["attempts"] >= bodies.get(c["tool"], 0), c  # a body never runs without its attempt record
    assert transcript_problems(k.db_url, k.session) == []
    steps = k.model_steps()
    assert steps[0] == 1, steps  # the saved reply was never asked for again
    for c in step0:
        if c["tool"] == "tx_book":  # decided by the database: its effect is exactly once, and ok
            assert c["status"] == "ok" and tx_rows(k, c["dispatch_id"]) == 1, c
        if c["tool"] == "rec_charge":  # decided by asking the outside system: exactly once, and ok
            assert c["status"] == "ok" and len([x for x in k.lines("charges") if x["dispatch_id"] == c["dispatch_id"]]) == 1, c
        if c["tool"] == "tx_rogue":  # it tried to reach past its tables: refused every time, one row
            how = os.environ.get("SCENARIO_ROGUE", "commit")
            refusals = {line["refused"] for line in k.lines("rogue")}
            if how in RAW_ROGUES:  # through the driver, past the guard: its connection ends with the call
                assert (c["status"], tx_rows(k, c["dispatch_id"])) in (("ok", 1), ("error", 0)), c  # SQLite's query_only fails the result write
                assert refusals == {None} and "[SQL:" not in str(c), (refusals, c)
            else:
                assert c["status"] == "ok" and tx_rows(k, c["dispatch_id"]) == 1, c
                # the guard; SQLite's driver under the authorizer; SQLite itself (sqlite_master)
                assert refusals <= {"ToolConnectionError", "DatabaseError", "OperationalError"} and None not in refusals, k.lines("rogue")
        if c["tool"] == "tx_escape":  # it committed its transaction itself: that effect once, never run again
            assert c["status"] == "outcome_unknown" and str(c["note"]).startswith("transaction_escaped:"), c
            assert tx_rows(k, c["dispatch_id"]) == 1, c


def _checks_that_found_nothing(k: Kit) -> Counter[str]:
    """NotApplied verdicts per tool, as the check wrote them down before answering."""
    return Counter(line["tool"] for line in k.lines("not_applied"))


@pytest.mark.kills
@pytest.mark.parametrize("point", STEP_CRASH_POINTS)
def test_crash_matrix(db_url: str, tmp_path: Path, point: str, scenario_sdk: str) -> None:
    """For both agent SDKs (``scenario_sdk``): an OpenAI Agents SDK agent has the same tools but the
    transactional one, which is an ``hx.tool`` only."""
    k = Kit(db_url, tmp_path, scenario="full")
    k.crash(point)
    result = k.wake().result
    assert result is not None
    check_invariants(k, result)
    tools = len(SCENARIOS["full"]) - (len(TRANSACTIONAL & set(SCENARIOS["full"])) if scenario_sdk == "openai_agents" else 0)
    assert len(result["calls"]) == tools, result["calls"]
    if point in ("after_model", "after_append", "before_step_commit", "after_step_commit"):
        # crashed before or after every body: each body ran exactly once, nothing is in doubt
        assert set(k.bodies().values()) == {1} and len(k.bodies()) == tools
        assert all(c["status"] == "ok" for c in result["calls"])


#: What the soak's misbehaving transactional body tries (``tests/scenarios/app.py``, ``_tx_rogue``):
#: end its transaction, write the ledger, change a session setting (through ``ctx.connection``, the
#: driver's connection, or past the guard), reach the ledger's schema, DBOS's, the private lock table.
ROGUE = ["commit", "sql_commit", "rollback", "helix_write", "read_only", "driver_read_only", "temp_view", *sorted(RAW_ROGUES)]
ROGUE_PG = ["alter_schema", "set_schema", "alter_database", "private_lock", "dbos_enqueue", "driver_set_config"]
ROGUE_SQLITE = ["writable_schema", "sqlite_master"]
#: How the soak's escaping body reaches the commit (``_tx_escape``): through the result, the cursor, the frame stack.
ESCAPES = ["root", "cursor", "frames"]


@pytest.mark.kills
@pytest.mark.soak
def test_soak_random_kills(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = int(os.environ.get("HELIX_DBOS_SOAK_ROUNDS", "12"))
    rng = random.Random(int(os.environ.get("HELIX_DBOS_SOAK_SEED", "7")))
    # HELIX_DBOS_SOAK_SCENARIOS=tx_rogue,full: a soak aimed at some scenarios only
    menu = os.environ.get("HELIX_DBOS_SOAK_SCENARIOS", "mixed,group,sequential,safe,unsafe,tx,reconcile,full,tx_rogue,tx_escape").split(",")
    rogues = ROGUE + (ROGUE_SQLITE if is_sqlite(db_url) else ROGUE_PG)
    outcomes = []
    proxy = None if is_sqlite(db_url) else TcpProxy.for_url(db_url)
    for i in range(rounds):
        k = Kit(db_url, tmp_path / f"round{i}", scenario=rng.choice(menu))
        if k.scenario == "tx_rogue":
            monkeypatch.setenv("SCENARIO_ROGUE", rng.choice(rogues))  # every process of the round inherits it
        if k.scenario == "tx_escape":
            monkeypatch.setenv("SCENARIO_ESCAPE", rng.choice(ESCAPES))
        roll = rng.random()
        if roll < 0.5:
            point = rng.choice(STEP_CRASH_POINTS)
            out = k.run("start", crash_at=point)
            how = f"crash_at={point} exit={out.code}"
        elif proxy is not None and roll < 0.7:
            k = dataclasses.replace(k, db_url=proxy.url(db_url))
            how = _connection_cut(k, proxy, rng)
        elif roll < 0.8:
            how = _signals(k, rng, double=rng.random() < 0.5)
        else:  # runs with bodies long enough for the CLI's seconds of start-up to land in them, or not
            k = dataclasses.replace(k, scenario=rng.choice(["slow_pair", "slow_one_then_seq", "cancel"]))
            how = _dbos_cancel(k, rng)
        result = k.wake().result
        assert result is not None, how
        if how.startswith("dbos cancel"):
            how += _check_cancel(k, result)
            outcomes.append((k.scenario, how, dict(k.bodies())))
            continue
        check_invariants(k, result, cut=how.startswith("connection cut"))
        if how.startswith("connection cut"):  # nothing crashed: nothing is in doubt, nothing ran twice
            # (a transactional body whose transaction was cut starts again; its one row is checked above)
            ran = {tool: n for tool, n in k.bodies().items() if tool not in TRANSACTIONAL}
            answered = [c for c in result["calls"] if c["tool"] not in ESCAPING]  # checked in check_invariants
            assert all(c["status"] == "ok" for c in answered) and set(ran.values()) <= {1}, (how, result["calls"])
        what = {"tx_rogue": os.environ.get("SCENARIO_ROGUE"), "tx_escape": os.environ.get("SCENARIO_ESCAPE")}.get(k.scenario)
        outcomes.append((k.scenario + (f" ({what})" if what else ""), how, dict(k.bodies())))
    if proxy is not None:
        proxy.close()
    print(f"soak: {rounds} rounds, all invariants held")  # noqa: T201 - what the soak tried, shown with -s
    for o in outcomes:
        print("  ", o)  # noqa: T201


def _under_way(k: Kit, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not k.lines("model") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the run is under way once the model has been asked


def _signals(k: Kit, rng: random.Random, *, double: bool) -> str:
    """One signal at a random moment of the run, or two (the second Ctrl-C of an impatient
    operator, or a supervisor's SIGTERM after it), 0.05-2 s apart."""
    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": "1"})
    _under_way(k, proc)
    delay = rng.uniform(0.0, 0.4)
    time.sleep(delay)
    sig = rng.choice([signal.SIGKILL, signal.SIGINT, signal.SIGTERM])  # Ctrl-C and SIGTERM: the shutdown path
    proc.send_signal(sig)
    how = f"{signal.Signals(sig).name} {delay:.2f}s after the first model request"
    if double:
        gap = rng.uniform(0.05, 2.0)
        time.sleep(gap)
        second = rng.choice([signal.SIGINT, signal.SIGINT, signal.SIGTERM])
        if proc.poll() is None:
            proc.send_signal(second)
        how += f", then {signal.Signals(second).name} {gap:.2f}s later"
    proc.wait(60)
    return how


def _dbos_cancel(k: Kit, rng: random.Random) -> str:
    """``dbos workflow cancel`` (DBOS's own CLI) at a random moment of the run; the app runs on."""
    from tests.processes.test_dbos_operator import dbos_cli

    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": f"{rng.uniform(2.0, 10.0):.2f}"})
    _under_way(k, proc)
    delay = rng.uniform(0.0, 1.5)
    time.sleep(delay)
    run_id = query(k.db_url, f"SELECT current_run_id FROM {helix_table(k.db_url, 'sessions')} WHERE session_id = :s", s=k.session)[0]["current_run_id"]
    dbos_cli(k.db_url, "cancel", run_id)
    proc.wait(120)
    return f"dbos cancel {delay:.2f}s after the first model request"


def _check_cancel(k: Kit, result: dict[str, Any]) -> str:
    """A DBOS cancel either landed (DBOS ``CANCELLED``, the run ``failed`` / ``run_stopped``, every
    call answered) or came after the run's end (``SUCCESS``, ``completed``), never a mix; bodies and
    model requests keep their bounds; the session takes its next entry."""
    from tests.processes.test_dbos_operator import workflow

    first = result["runs"][0]["run_id"] if result.get("runs") else result["run_id"]
    dbos = (workflow(k.db_url, first) or {}).get("status")
    run = query(k.db_url, f"SELECT status, error_code FROM {helix_table(k.db_url, 'runs')} WHERE run_id = :r", r=first)[0]
    if dbos == "CANCELLED":
        assert (run["status"], run["error_code"]) == ("failed", "run_stopped"), (dbos, run)
    else:
        assert dbos == "SUCCESS" and run["status"] == "completed", (dbos, run)
    assert all(c["status"] in CALL_SETTLED for c in result["calls"]), result["calls"]
    for tool, n in k.bodies().items():
        assert n <= (1 if tool in UNSAFE | RECONCILED | {"tx_book"} else 3), (tool, n)
    assert k.model_steps()[0] == 1 and transcript_problems(k.db_url, k.session) == []
    nxt = k.entry("turn", message="again")
    assert nxt.code == 0 and nxt.result is not None and nxt.result["status"] == "completed", nxt.stderr[-2000:]
    return f": {dbos}"


def _connection_cut(k: Kit, proxy: TcpProxy, rng: random.Random) -> str:
    """The database goes away mid-run for 0.5-4 s (connections reset, new ones refused), then returns:
    the same process rides it out inside its store_retry_window and completes the run."""
    proc = k.spawn("start", extra_env={"HELIX_DBOS_STORE_RETRY_WINDOW": "30"})
    deadline = time.monotonic() + 120
    while not k.lines("model") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    delay, length = rng.uniform(0.0, 0.4), rng.uniform(0.5, 4.0)
    time.sleep(delay)
    with proxy.outage(length):
        pass
    proc.communicate(timeout=90)
    how = f"connection cut {length:.1f}s, {delay:.2f}s after the first model request"
    assert proc.returncode == 0, (how, proc.returncode)
    return how
