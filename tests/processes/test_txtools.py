"""Transactional tools and reconcile checks under real kills, on SQLite and Postgres.

Body starts and the outside system's effects are counted by the tools themselves, outside the
runtime (fsynced files; the transactional tool's rows in its own table), and the ledger row says
what decided each call: the database (a transaction that never committed had no effect) or the
tool's check (the outside system, asked by dispatch id).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pydantic
import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelRequest, ToolReturnPart

import helix_dbos as hx
from helix_dbos.ledger import messages as message_rows
from helix_dbos.ledger import rows
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from helix_dbos.runtime.floor import transcript
from helix_dbos.runtime.process.faults import CRASH_EXIT_CODE, STEP_CRASH_POINTS
from tests.support.crashkit import Kit, transcript_problems

BODY_POINTS = ("before_body", "after_body", "after_result")


def _query(db_url: str, stmt: Any, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            if isinstance(stmt, str):
                return [dict(r._mapping) for r in conn.execute(sa.text(stmt), params or {})]
            return rows.fetch_all(conn, stmt)
    finally:
        engine.dispose()


def ledger_call(k: Kit, tool: str) -> dict[str, Any]:
    [row] = _query(k.db_url, sa.select(t.calls).where(t.calls.c.session_id == k.session, t.calls.c.tool_name == tool, t.calls.c.step == 0))
    return row


def audit_row(k: Kit, dispatch_id: str) -> dict[str, Any]:
    prefix = "" if is_sqlite(k.db_url) else "helix."
    [row] = _query(k.db_url, f"SELECT * FROM {prefix}call_audit WHERE dispatch_id = :d", {"d": dispatch_id})
    return row


def tx_rows(k: Kit, dispatch_id: str) -> int:
    return len(_query(k.db_url, "SELECT id FROM scenario_tx_effects WHERE dispatch_id = :d", {"d": dispatch_id}))


def told(k: Kit, tool: str) -> Any:
    """What the model read for the step-0 call of ``tool``."""
    engine = create_sync_engine(k.db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            messages = message_rows.active_messages(conn, k.session)
    finally:
        engine.dispose()
    for m in messages:
        if m["kind"] == "request" and m["step"] == 0:
            request = transcript.load([m["body"]])[0]
            assert isinstance(request, ModelRequest)
            return next(p.content for p in request.parts if isinstance(p, ToolReturnPart) and p.tool_name == tool)
    raise AssertionError("no request answers step 0")


def finish(k: Kit, point: str | None, tool: str) -> dict[str, Any]:
    """Crash at ``point`` (aimed at ``tool`` for a body's points), relaunch, return the result."""
    if point is None:
        out = k.start()
        assert out.code == 0 and out.result is not None, out.stderr[-3000:]
        return out.result
    k.crash(f"{point}:{tool}" if point in BODY_POINTS else point)
    result = k.wake().result
    assert result is not None
    return result


def charges(k: Kit, dispatch_id: str) -> list[dict[str, Any]]:
    return [c for c in k.lines("charges") if c["dispatch_id"] == dispatch_id]


# --- transactional tools ---------------------------------------------------------------------


@pytest.mark.parametrize("point", STEP_CRASH_POINTS)
def test_transactional_call_is_exactly_once_at_every_point(db_url: str, tmp_path: Path, point: str) -> None:
    k = Kit(db_url, tmp_path, scenario="tx")
    result = finish(k, point, "tx_book")
    assert result["status"] == "completed", result
    call = ledger_call(k, "tx_book")
    assert tx_rows(k, call["dispatch_id"]) == 1  # its effect, counted in its own table: exactly one
    assert call["status"] == "ok" and call["result"]["rows_seen"] == 1
    assert told(k, "tx_book") == call["result"]  # the model was told ok, with the body's own result
    assert transcript_problems(db_url, k.session) == []
    assert k.model_steps()[0] == 1
    if point in ("before_body", "after_body"):
        # the attempt begun was a marker; the database proved the body had no effect, so it ran again
        assert call["attempts"] == 2 and call["decided_by"] == "database"
        assert k.bodies()["tx_book"] == (2 if point == "after_body" else 1)
        audit = audit_row(k, call["dispatch_id"])
        assert audit["decided_by"] == "database" and audit["lost_attempts"] == 0
    else:
        assert call["attempts"] == 1 and call["decided_by"] is None and k.bodies()["tx_book"] == 1


@pytest.mark.kills
def test_transactional_body_dying_every_time_stops_after_three_attempts(db_url: str, tmp_path: Path) -> None:
    k = Kit(db_url, tmp_path, scenario="tx")
    k.crash("after_body:tx_book")
    for _ in range(2):
        assert k.run("wake", crash_at="after_body:tx_book").code == CRASH_EXIT_CODE
    last = k.run("wake", crash_at="after_body:tx_book")  # no body runs any more: the limit answers
    assert last.code == 0 and last.result is not None, last.stderr[-3000:]
    call = ledger_call(k, "tx_book")
    assert k.bodies()["tx_book"] == 3 and tx_rows(k, call["dispatch_id"]) == 0
    assert (call["status"], call["attempts"], call["decided_by"]) == ("replay_limit_reached", 3, "database")
    assert "Nothing took effect" in call["outcome_note"]
    assert told(k, "tx_book")["status"] == "replay_limit_reached"
    assert last.result["status"] == "completed"


def test_transactional_body_error_rolls_its_writes_back(db_url: str, tmp_path: Path) -> None:
    k = Kit(db_url, tmp_path, scenario="tx")
    out = k.run("start", extra_env={"SCENARIO_TX_FAIL": "1"})
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]
    call = ledger_call(k, "tx_book")
    assert call["status"] == "error" and call["error"]["type"] == "RuntimeError"
    assert k.bodies()["tx_book"] == 1 and tx_rows(k, call["dispatch_id"]) == 0


# --- reconciled tools ----------------------------------------------------------------------------


@pytest.mark.parametrize("point", ["after_body", "after_result"])
def test_reconciled_call_killed_after_its_effect_is_ok_and_never_runs_twice(db_url: str, tmp_path: Path, point: str) -> None:
    k = Kit(db_url, tmp_path, scenario="reconcile")
    result = finish(k, point, "rec_charge")
    assert result["status"] == "completed"
    call = ledger_call(k, "rec_charge")
    [effect] = charges(k, call["dispatch_id"])
    assert k.bodies()["rec_charge"] == 1
    assert call["status"] == "ok" and call["result"] == effect["receipt"]
    assert told(k, "rec_charge") == effect["receipt"]
    if point == "after_body":  # the result never reached the ledger: the check answered for it
        assert call["decided_by"] == "check" and call["check_outcome"]["verdict"] == "applied"
        audit = audit_row(k, call["dispatch_id"])
        outcome = audit["check_outcome"]
        outcome = json.loads(outcome) if isinstance(outcome, str) else outcome  # JSON text on SQLite
        assert audit["decided_by"] == "check" and outcome["verdict"] == "applied"
    else:  # the result was recorded: nobody had to ask
        assert call["decided_by"] is None and not k.lines("checks")
    assert transcript_problems(db_url, k.session) == []


def test_reconciled_call_killed_before_its_effect_runs_once_more(db_url: str, tmp_path: Path) -> None:
    k = Kit(db_url, tmp_path, scenario="reconcile")
    finish(k, "before_body", "rec_charge")
    call = ledger_call(k, "rec_charge")
    assert len(charges(k, call["dispatch_id"])) == 1 and k.bodies()["rec_charge"] == 1
    assert (call["status"], call["attempts"], call["decided_by"]) == ("ok", 2, "check")
    assert call["check_outcome"]["verdict"] == "not_applied" and call["check_outcome"]["attempt"] == 1
    assert told(k, "rec_charge")["attempt"] == 2


@pytest.mark.kills
@pytest.mark.parametrize("how", ["raise", "timeout", "none"])
def test_check_that_cannot_tell_gives_outcome_unknown(db_url: str, tmp_path: Path, how: str) -> None:
    k = Kit(db_url, tmp_path, scenario="reconcile")
    k.crash("after_body:rec_charge")
    result = k.wake(extra_env={"SCENARIO_CHECK": how}).result
    assert result is not None and result["status"] == "completed"
    call = ledger_call(k, "rec_charge")
    assert call["status"] == "outcome_unknown" and k.bodies()["rec_charge"] == 1
    assert call["check_outcome"]["verdict"] == "unknown" and call["decided_by"] is None
    reason = call["check_outcome"]["reason"]
    assert {"raise": "ConnectionError", "timeout": "timed out after 0.5 s", "none": "returned None"}[how] in reason
    assert told(k, "rec_charge")["status"] == "outcome_unknown"


def test_a_reconciled_call_frees_the_call_ordered_after_it(db_url: str, tmp_path: Path) -> None:
    k = Kit(db_url, tmp_path, scenario="reconcile_seq")
    finish(k, "after_body", "rec_seq")
    first, second = ledger_call(k, "rec_seq"), ledger_call(k, "seq_b")
    assert (first["status"], first["decided_by"]) == ("ok", "check")
    assert second["status"] == "ok" and k.bodies()["seq_b"] == 1  # not outcome_unknown: the call ahead is known


def test_a_reconciled_call_behind_an_unsafe_call_of_its_lane_is_checked(db_url: str, tmp_path: Path) -> None:
    """The lane ran the unsafe call, then the reconciled one, and died after the reconciled body:
    recovery asks the check about the call behind, and its verdict (applied) answers it."""
    k = Kit(db_url, tmp_path, scenario="seq_reconcile")
    finish(k, "after_body", "rec_seq")
    ahead, behind = ledger_call(k, "seq_unsafe"), ledger_call(k, "rec_seq")
    assert ahead["status"] == "ok" and k.bodies() == {"seq_unsafe": 1, "rec_seq": 1}
    assert [c["dispatch_id"] for c in k.lines("checks")] == [behind["dispatch_id"]]  # asked once, about the call behind
    [effect] = charges(k, behind["dispatch_id"])
    assert (behind["status"], behind["decided_by"], behind["check_outcome"]["verdict"]) == ("ok", "check", "applied")
    assert behind["result"] == effect["receipt"] == told(k, "rec_seq")
    assert transcript_problems(db_url, k.session) == []


# --- entries other than the wake ---------------------------------------------------------------------


@pytest.mark.kills
@pytest.mark.parametrize("kind", ["continue", "retry", "turn"])
def test_transactional_call_under_each_entry_after_a_kill(db_url: str, tmp_path: Path, kind: str) -> None:
    """Killed after the transactional body (its transaction never committed), another executor enters:
    ``resume`` and ``retry()`` run it again, exactly once in effect; a new message pairs it not_started."""
    k = Kit(db_url, tmp_path, scenario="tx")
    k.crash("after_body:tx_book")
    out = k.entry(kind, message="never mind" if kind == "turn" else None, executor=f"{k.executor}-other")
    assert out.code == 0 and out.result is not None and out.result["status"] == "completed", out.stderr[-3000:]
    call = ledger_call(k, "tx_book")
    assert call["decided_by"] == "database"
    if kind == "turn":  # a redirect runs nothing again; the database proves the body had no effect
        assert (call["status"], call["paired_by"]) == ("not_started", "redirect")
        assert tx_rows(k, call["dispatch_id"]) == 0 and k.bodies()["tx_book"] == 1
        assert "did not take effect" in told(k, "tx_book")["message"]
    else:
        assert (call["status"], call["attempts"]) == ("ok", 2) and k.bodies()["tx_book"] == 2
        assert tx_rows(k, call["dispatch_id"]) == 1 and told(k, "tx_book") == call["result"]
    assert transcript_problems(db_url, k.session) == []


@pytest.mark.kills
@pytest.mark.parametrize(("point", "kind"), [("after_body", "turn"), ("before_body", "with_message")])
def test_a_redirect_asks_the_check_before_it_pairs(db_url: str, tmp_path: Path, point: str, kind: str) -> None:
    """A new message pairs every unanswered call; a started reconciled call is asked about first:
    charged (killed after the body) it is answered ok with the charge, not charged it is not_started.
    The verdict is on the row: a replay of the redirecting run never asks again."""
    k = Kit(db_url, tmp_path, scenario="reconcile")
    k.crash(f"{point}:rec_charge")
    other = f"{k.executor}-other"
    if point == "after_body":  # the redirecting run dies after its pairing; its replay must not ask again
        assert k.entry(kind, message="never mind", executor=other, crash_at="after_model").code == CRASH_EXIT_CODE
        out = k.run("wake", executor=other)
    else:
        out = k.entry(kind, message="never mind", executor=other)
    assert out.code == 0 and out.result is not None and out.result["status"] == "completed", out.stderr[-3000:]
    call = ledger_call(k, "rec_charge")
    assert len(k.lines("checks")) == 1 and call["decided_by"] == "check"
    if point == "after_body":
        [effect] = charges(k, call["dispatch_id"])
        assert (call["status"], call["check_outcome"]["verdict"]) == ("ok", "applied")
        assert call["result"] == effect["receipt"] == told(k, "rec_charge")
    else:
        assert (call["status"], call["check_outcome"]["verdict"]) == ("not_started", "not_applied")
        assert charges(k, call["dispatch_id"]) == [] and told(k, "rec_charge")["status"] == "not_started"
    assert k.bodies().get("rec_charge", 0) == (1 if point == "after_body" else 0)  # a redirect runs no body
    assert transcript_problems(db_url, k.session) == []


@pytest.mark.kills
def test_a_queued_new_turn_asks_the_check_and_runs(db_url: str, tmp_path: Path) -> None:
    """A new turn through an entry queue (``limits``) starts ``queued``: the reconcile check it asks
    before its pairing transaction (which turns it running) is recorded, and the turn runs; it used to
    be refused by the fence (``queued``), leaving the run and its session queued for ever."""
    k = Kit(db_url, tmp_path, scenario="reconcile")
    k.crash("after_body:rec_charge")
    # the limit is new to this agent (the crashed process had none): a change made on purpose
    out = k.entry("turn", message="again", executor=f"{k.executor}-other", extra_env={"SCENARIO_MAX_RUNNING": "1", "HELIX_DBOS_REPLACE_LIMITS": "1"})
    assert out.code == 0 and out.result is not None and out.result["status"] == "completed", out.stderr[-3000:]
    assert [r["status"] for r in out.result["runs"]] == ["failed", "completed"]
    call = ledger_call(k, "rec_charge")
    [effect] = charges(k, call["dispatch_id"])
    assert (call["status"], call["decided_by"], call["check_outcome"]["verdict"]) == ("ok", "check", "applied")
    assert call["result"] == effect["receipt"] == told(k, "rec_charge")
    assert len(k.lines("checks")) == 1 and k.bodies()["rec_charge"] == 1  # asked once, no body ran again
    assert transcript_problems(db_url, k.session) == []


# --- async checks, in process, through a failing run and retry() -------------------------------------


def _paying_agent(check: Any, timeout: float = 5.0) -> tuple[hx.Agent, list[str]]:
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    bodies: list[str] = []

    @hx.tool(reconcile=check, reconcile_timeout=timeout)
    async def pay(ctx: hx.ToolContext, amount: int) -> dict[str, Any]:
        """Pay an amount."""
        bodies.append(ctx.require_dispatch_id())
        return {"paid": amount, "by": "body"}

    def reply(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("pay", {"amount": 5}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    return hx.Agent("payer", FunctionModel(reply), tools=[pay]), bodies


def test_an_async_check_answers_a_failing_runs_call(db_url: str, make_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that fails after a call's attempt asks the (async) check before pairing it: Applied
    answers it ok with the check's result, and retry() keeps that answer."""
    asked: list[hx.CheckContext] = []

    async def paid(ctx: hx.CheckContext) -> hx.Applied:
        asked.append(ctx)
        await asyncio.sleep(0)
        return hx.Applied({"paid": ctx.args["amount"], "by": "check"})

    agent, bodies = _paying_agent(paid)
    rt = make_runtime([agent])
    monkeypatch.setenv("HELIX_DBOS_FAIL_AT", "before_body:pay")
    failed = rt.start("payer", "go").result(timeout=60)
    assert (failed.status, failed.error_code) == ("failed", "injected_fault")
    [call] = rt.session(failed.session_id).calls
    assert (call.status, call.decided_by, call.result) == ("ok", "check", {"paid": 5, "by": "check"})
    assert call.check_outcome is not None and call.check_outcome["verdict"] == "applied"
    assert [(c.dispatch_id, c.attempts) for c in asked] == [(call.dispatch_id, 1)] and bodies == []
    monkeypatch.delenv("HELIX_DBOS_FAIL_AT")
    done = rt.retry(failed.session_id).result(timeout=60)
    [call] = rt.session(failed.session_id).calls
    assert done.status == "completed" and call.status == "ok" and len(asked) == 1 and bodies == []


def test_an_async_check_that_times_out_leaves_outcome_unknown_until_retry_asks_again(
    db_url: str, make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An async check past its reconcile_timeout cannot tell: the failed run's call is outcome_unknown.
    retry() asks again; this time it answers NotApplied, so the body runs (once)."""
    slow = [True]

    async def check(ctx: hx.CheckContext) -> hx.NotApplied:
        if slow[0]:
            await asyncio.sleep(5)
        return hx.NotApplied()

    agent, bodies = _paying_agent(check, timeout=0.2)
    rt = make_runtime([agent])
    monkeypatch.setenv("HELIX_DBOS_FAIL_AT", "before_body:pay")
    failed = rt.start("payer", "go").result(timeout=60)
    [call] = rt.session(failed.session_id).calls
    assert failed.status == "failed" and (call.status, call.decided_by) == ("outcome_unknown", None)
    assert call.check_outcome is not None and call.check_outcome["verdict"] == "unknown"
    assert "timed out after 0.2 s" in call.check_outcome["reason"]
    monkeypatch.delenv("HELIX_DBOS_FAIL_AT")
    slow[0] = False
    done = rt.retry(failed.session_id).result(timeout=60)
    [call] = rt.session(failed.session_id).calls
    assert done.status == "completed" and (call.status, call.decided_by, len(call.attempts)) == ("ok", "check", 2)
    assert call.result == {"paid": 5, "by": "body"} and bodies == [call.dispatch_id]


# --- definitions: refused at definition time, typed ------------------------------------------------


def test_combinations_the_runtime_cannot_keep_are_refused_at_definition_time() -> None:
    from helix_dbos.errors import ConfigurationError

    async def async_body(ctx: hx.ToolContext, x: int) -> int:
        return x

    def check(ctx: hx.CheckContext) -> None:
        return None

    class Args(pydantic.BaseModel):
        x: int

    async def async_execute(args: Args, ctx: hx.ToolContext) -> int:
        return args.x

    for build in (
        lambda: hx.tool(transactional=True)(async_body),
        lambda: hx.define_tool(name="d", description="d", input_schema=Args, execute=async_execute, transactional=True),
        lambda: hx.tool(transactional=True, reconcile=check)(lambda ctx, x: x),
        lambda: hx.tool(reconcile=check, reconcile_timeout=0)(async_body),
        lambda: hx.tool(reconcile=42)(async_body),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigurationError) as err:
            build()
        assert err.value.code == "configuration_error"
    assert "Applied" in hx.__all__ and "NotApplied" in hx.__all__


def test_define_tool_transactional_writes_commit_with_the_result(db_url: str, make_runtime: Any) -> None:
    """In process: ``define_tool(..., transactional=True)`` gets ``ctx.connection`` in the result's transaction."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from tests.scenarios.app import tx_effects, tx_meta

    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    tx_meta.create_all(engine)
    engine.dispose()

    class Args(pydantic.BaseModel):
        key: str

    seen: list[bool] = []

    def execute(args: Args, ctx: hx.ToolContext) -> dict[str, Any]:
        conn = ctx.require_connection()
        conn.execute(tx_effects.insert().values(dispatch_id=ctx.require_dispatch_id(), key=args.key))
        # the ledger is not the body's to read (nor write): refused, and the transaction goes on
        try:
            conn.execute(sa.select(t.calls.c.status).where(t.calls.c.dispatch_id == ctx.dispatch_id))
        except hx.ToolConnectionError:
            seen.append(True)
        seen.append(conn.execute(sa.select(sa.func.count()).select_from(tx_effects).where(tx_effects.c.dispatch_id == ctx.dispatch_id)).scalar() == 1)
        return {"key": args.key}

    def reply(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("put", {"key": "k"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    put = hx.define_tool(name="put", description="Put a row.", input_schema=Args, execute=execute, transactional=True)
    rt = make_runtime([hx.Agent("tx", FunctionModel(reply), tools=[put])])
    result = rt.start("tx", "go").result(timeout=60)
    [call] = rt.session(result.session_id).calls
    assert result.status == "completed" and call.status == "ok" and seen == [True, True]
    assert call.decided_by is None and call.check_outcome is None  # its own result answered it
    rows = _query(db_url, "SELECT key FROM scenario_tx_effects WHERE dispatch_id = :d", {"d": call.dispatch_id})
    assert rows == [{"key": "k"}]


@pytest.mark.kills
def test_killed_between_the_checks_answer_and_its_record_asks_again(db_url: str, tmp_path: Path) -> None:
    k = Kit(db_url, tmp_path, scenario="reconcile")
    k.crash("after_body:rec_charge")
    assert k.run("wake", crash_at="after_check:rec_charge").code == CRASH_EXIT_CODE  # the verdict never reached the row
    k.wake()
    call = ledger_call(k, "rec_charge")
    assert (call["status"], call["decided_by"]) == ("ok", "check") and k.bodies()["rec_charge"] == 1
    assert len(k.lines("checks")) == 2 and len(charges(k, call["dispatch_id"])) == 1  # asked twice (it only reads), charged once
