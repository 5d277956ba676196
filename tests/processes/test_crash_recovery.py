"""The recovery contract under real process kills, on SQLite and Postgres, for both agent SDKs.

Each test crashes a real child process at a named durable boundary (``HELIX_DBOS_CRASH_AT``) and
relaunches it. Body starts and model requests are counted by the application itself, in fsynced
files outside the runtime; ledger statuses and the text the model finally reads are asserted too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from helix_dbos.ledger import calls as call_rows
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.recovery import NOT_STARTED, OUTCOME_UNKNOWN, REPLAY_LIMIT_REACHED
from helix_dbos.runtime.floor import commits
from tests.support.crashkit import Kit, calls_by_tool, transcript_problems


@pytest.fixture(autouse=True)
def _in_each_sdk(scenario_sdk: str) -> None:
    """Every test here runs with the scenario's agent as an ``hx.Agent`` and as an OpenAI Agents SDK agent."""


def kit(db_url: str, tmp_path: Path, scenario: str) -> Kit:
    return Kit(db_url, tmp_path, scenario=scenario)


def seen_by_model(k: Kit, step: int = 1) -> list[Any]:
    """What the model was shown as tool results when asked at ``step`` (exactly once)."""
    asks = [line for line in k.lines("model") if line["step"] == step]
    assert len(asks) == 1, f"model asked {len(asks)} times at step {step}"
    return asks[0]["seen"]


def assert_saved_step_not_asked_again(k: Kit) -> None:
    assert k.model_steps() == {0: 1, 1: 1}, k.model_steps()


@pytest.mark.kills
def test_wake_runs_a_safe_call_again_with_the_same_dispatch_id(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "safe")
    k.crash("after_body:safe_set")
    result = k.wake().result
    assert result is not None and result["status"] == "completed"
    call = calls_by_tool(result)["safe_set"]
    assert (call["status"], call["attempts"]) == ("ok", 2)
    bodies = [b for b in k.lines("bodies") if b["tool"] == "safe_set"]
    assert [b["attempt"] for b in bodies] == [1, 2]
    assert {b["dispatch_id"] for b in bodies} == {call["dispatch_id"]}
    assert seen_by_model(k)[0]["dispatch_id"] == call["dispatch_id"]
    assert_saved_step_not_asked_again(k)


@pytest.mark.kills
def test_a_safe_call_stops_at_three_bodies(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "safe")
    k.crash("after_body:safe_set")
    for _ in range(2):  # each relaunch runs the body again and crashes again
        out = k.run("wake", crash_at="after_body:safe_set")
        assert out.code == 97, out.stderr[-2000:]
    result = k.wake().result
    assert result is not None
    call = calls_by_tool(result)["safe_set"]
    assert (call["status"], call["attempts"], call["note"]) == ("replay_limit_reached", 3, REPLAY_LIMIT_REACHED)
    assert k.bodies()["safe_set"] == 3
    assert seen_by_model(k) == [{"status": "replay_limit_reached", "message": REPLAY_LIMIT_REACHED}]
    assert_saved_step_not_asked_again(k)


@pytest.mark.kills
def test_a_call_behind_a_doubted_call_of_its_group_is_outcome_unknown(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "group")  # group_unsafe, then group_b (safe) in concurrency group "g"
    k.crash("after_body:group_unsafe")
    result = k.wake().result
    assert result is not None
    calls = calls_by_tool(result)
    assert calls["group_unsafe"]["status"] == "outcome_unknown"
    assert (calls["group_b"]["status"], calls["group_b"]["attempts"]) == ("outcome_unknown", 0)
    assert k.bodies() == {"group_unsafe": 1}
    seen = seen_by_model(k)
    assert seen[0] == {"status": "outcome_unknown", "message": OUTCOME_UNKNOWN}
    assert seen[1]["status"] == "outcome_unknown" and seen[1]["message"].startswith(OUTCOME_UNKNOWN)


@pytest.mark.kills
def test_a_call_behind_a_doubted_call_of_the_sequential_chain_is_outcome_unknown(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "sequential")  # seq_unsafe, then seq_b (safe), both sequential
    k.crash("after_body:seq_unsafe")
    result = k.wake().result
    assert result is not None
    calls = calls_by_tool(result)
    assert [calls["seq_unsafe"]["status"], calls["seq_b"]["status"]] == ["outcome_unknown", "outcome_unknown"]
    assert k.bodies() == {"seq_unsafe": 1}


@pytest.mark.kills
@pytest.mark.parametrize("variant", ["unsafe_now", "removed", "schema_changed"])
def test_a_deploy_between_crash_and_recovery_only_makes_recovery_more_careful(db_url: str, tmp_path: Path, variant: str) -> None:
    k = kit(db_url, tmp_path, "safe")
    k.crash("after_body:safe_set")
    result = k.wake(variant=variant).result
    assert result is not None and result["status"] == "completed"
    call = calls_by_tool(result)["safe_set"]
    assert (call["status"], call["attempts"]) == ("outcome_unknown", 1)
    assert k.bodies()["safe_set"] == 1


DOUBTED = {"status": "outcome_unknown", "message": OUTCOME_UNKNOWN}


@pytest.mark.kills
@pytest.mark.parametrize(
    ("point", "status", "bodies", "told"),
    [
        # the attempt was committed, so the runtime cannot prove the body never ran: outcome_unknown
        ("before_body:unsafe_send", "outcome_unknown", 0, DOUBTED),
        # the body ran and its result was never recorded: paired outcome_unknown, never run again
        ("after_body:unsafe_send", "outcome_unknown", 1, DOUBTED),
        # a recorded result is never run again nor doubted
        ("after_result:unsafe_send", "ok", 1, {"tool": "unsafe_send"}),
    ],
    ids=["crashed_before_its_body_still_in_doubt", "crashed_after_its_body_paired_outcome_unknown", "recorded_result_never_run_again_nor_doubted"],
)
def test_an_unsafe_call_after_a_crash_at_each_point_of_its_body(
    db_url: str, tmp_path: Path, point: str, status: str, bodies: int, told: dict[str, str]
) -> None:
    k = kit(db_url, tmp_path, "unsafe")
    k.crash(point)
    result = k.wake().result
    assert result is not None and result["status"] == "completed"
    call = calls_by_tool(result)["unsafe_send"]
    assert (call["status"], call["attempts"]) == (status, 1)
    if status == "outcome_unknown":
        assert call["note"] == OUTCOME_UNKNOWN
    assert k.bodies()["unsafe_send"] == bodies
    seen = seen_by_model(k)
    assert len(seen) == 1 and {key: seen[0].get(key) for key in told} == told, seen
    assert_saved_step_not_asked_again(k)


@pytest.mark.kills
@pytest.mark.parametrize("point", ["after_model", "after_append"])
def test_a_crash_before_any_body_runs_every_call_once(db_url: str, tmp_path: Path, point: str) -> None:
    k = kit(db_url, tmp_path, "mixed")
    k.crash(point)
    result = k.wake().result
    assert result is not None and result["status"] == "completed"
    assert all(c["status"] == "ok" and c["attempts"] == 1 for c in result["calls"])
    assert set(k.bodies().values()) == {1}
    assert_saved_step_not_asked_again(k)


@pytest.mark.kills
@pytest.mark.parametrize("fmt", [1, 2])
def test_a_replayed_append_answers_its_calls_in_either_record_format(db_url: str, tmp_path: Path, fmt: int) -> None:
    """The append's record (``helix.append#0``) holds the saved step without its calls (format 2: a
    replay reads them from the ledger); a record of format 1, written by earlier code, holds them and
    a replay uses them. Either way a crash after the append runs every call once, model not asked again."""
    k = kit(db_url, tmp_path, "mixed")
    k.crash("after_append")
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    o = t.tx_outputs.c
    try:
        with engine.begin() as conn:
            record = conn.execute(sa.select(o.workflow_id, o.output).where(o.op == "helix.append#0")).one()
            assert record.output.get("v") == 2 and "calls" not in record.output, record.output
            calls = call_rows.of_step(conn, record.output["run_id"], record.output["step"])
            assert len(calls) >= 2
            if fmt == 1:  # as earlier code recorded it: the step and its calls' briefs
                v1 = {k_: record.output[k_] for k_ in ("run_id", "step", "checkpoint_id")} | {"calls": [commits.brief(c) for c in calls]}
                conn.execute(t.tx_outputs.update().where(o.workflow_id == record.workflow_id, o.op == "helix.append#0").values(output=v1))
    finally:
        engine.dispose()
    result = k.wake().result
    assert result is not None and result["status"] == "completed"
    assert all(c["status"] == "ok" and c["attempts"] == 1 for c in result["calls"])
    assert set(k.bodies().values()) == {1} and len(k.bodies()) == len(calls)
    assert_saved_step_not_asked_again(k)


# --- entries over a saved step ------------------------------------------------------------------


@pytest.mark.kills
def test_a_failed_model_request_is_recorded_and_never_asked_again(db_url: str, tmp_path: Path) -> None:
    """The model's outcome is recorded before anything acts on it, a failure as much as a reply: a
    crash after a request failed for good (before the run's failure is written) fails the run from
    the record on relaunch, with the same error, and the model is not asked a second time."""
    k = kit(db_url, tmp_path, "model_error")
    k.crash("after_model")
    assert k.model_steps() == {0: 1}
    result = k.wake().result
    assert result["status"] == "failed" and result["error_code"] == "model_request_invalid", result  # the provider's 400, typed
    assert k.model_steps() == {0: 1}, k.model_steps()
    engine = create_sync_engine(db_url)
    try:
        with engine.connect() as conn:
            record = conn.execute(sa.select(t.tx_outputs.c.output).where(t.tx_outputs.c.workflow_id == result["run_id"], t.tx_outputs.c.op == "helix.reply#0")).scalar_one()
            error = conn.execute(sa.select(t.runs.c.error).where(t.runs.c.run_id == result["run_id"])).scalar_one()
    finally:
        engine.dispose()
    assert record["raised"][0] == "model_request_invalid" and "HTTP 400" in record["raised"][1] and error == record["raised"][1], (record, error)


@pytest.mark.kills
def test_resume_continue_recovers_from_the_ledger_in_another_process(db_url: str, tmp_path: Path) -> None:
    """The crashed executor never comes back: another one resumes the session from the ledger."""
    k = kit(db_url, tmp_path, "mixed")
    k.crash("after_body:safe_set")
    out = k.entry("continue", executor=f"{k.executor}-other")
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]
    result = out.result
    assert [r["entry"] for r in result["runs"]] == ["start", "resume_continue"]
    assert result["runs"][0]["status"] == "failed"
    calls = calls_by_tool(result)
    assert (calls["safe_set"]["status"], calls["safe_set"]["attempts"]) == ("ok", 2)
    assert k.bodies()["safe_set"] == 2 and k.bodies()["unsafe_send"] <= 1
    assert calls["unsafe_send"]["status"] in ("ok", "outcome_unknown")
    assert_saved_step_not_asked_again(k)
    assert transcript_problems(db_url, k.session) == []


def test_retry_after_a_failed_run_replaces_its_outcome_unknown_rows(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "safe")
    failed = k.start(fail_at="before_body:safe_set").result
    assert failed is not None and failed["status"] == "failed" and failed["error_code"] == "injected_fault"
    paired = calls_by_tool(failed)["safe_set"]
    assert (paired["status"], paired["note"]) == ("outcome_unknown", OUTCOME_UNKNOWN)  # never left unanswered
    out = k.entry("retry")
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]
    call = calls_by_tool(out.result)["safe_set"]
    assert (call["status"], call["attempts"]) == ("ok", 2)
    assert k.bodies()["safe_set"] == 1  # the first attempt failed before its body
    assert_saved_step_not_asked_again(k)


def test_retry_of_an_unsafe_call_keeps_it_outcome_unknown(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "unsafe")
    k.start(fail_at="before_body:unsafe_send")
    out = k.entry("retry")
    assert out.result is not None
    call = calls_by_tool(out.result)["unsafe_send"]
    assert (call["status"], call["attempts"]) == ("outcome_unknown", 1)
    assert k.bodies().get("unsafe_send", 0) == 0


def test_a_failed_step_commit_answers_from_the_recorded_results_on_retry(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "mixed")
    failed = k.start(fail_at="step_commit").result
    assert failed is not None and failed["status"] == "failed"
    assert all(c["status"] == "ok" for c in failed["calls"])  # every body's result was recorded as it returned
    out = k.entry("retry")
    assert out.result is not None and out.result["status"] == "completed"
    assert set(k.bodies().values()) == {1}
    assert_saved_step_not_asked_again(k)
    assert transcript_problems(db_url, k.session) == []


@pytest.mark.kills
@pytest.mark.parametrize("kind", ["with_message", "retry_message", "turn"])
def test_a_message_redirects_the_turn_and_nothing_runs_again(db_url: str, tmp_path: Path, kind: str) -> None:
    k = kit(db_url, tmp_path, "sequential")
    k.crash("after_body:seq_unsafe")
    other = f"{k.executor}-other"
    if kind == "retry_message":
        out = k.entry("retry", message="never mind", executor=other)
    else:
        out = k.entry(kind, message="never mind", executor=other)
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]
    calls = calls_by_tool(out.result)
    assert (calls["seq_unsafe"]["status"], calls["seq_b"]["status"]) == ("outcome_unknown", "not_started")
    assert k.bodies() == {"seq_unsafe": 1}
    seen = seen_by_model(k)
    assert seen == [{"status": "outcome_unknown", "message": OUTCOME_UNKNOWN}, {"status": "not_started", "message": NOT_STARTED}]
    assert transcript_problems(db_url, k.session) == []


def _append_checkpoint(result: dict[str, Any]) -> str:
    return next(c["id"] for c in result["checkpoints"] if c["kind"] == "append")


@pytest.mark.kills
def test_resume_from_checkpoint_recovers_that_step(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "safe")
    k.crash("after_body:safe_set")
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        cp = conn.execute(sa.select(t.checkpoints.c.checkpoint_id).where(t.checkpoints.c.session_id == k.session, t.checkpoints.c.kind == "append")).scalar_one()
    engine.dispose()
    out = k.entry("from_checkpoint", checkpoint=cp, executor=f"{k.executor}-other")
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]
    call = calls_by_tool(out.result)["safe_set"]
    assert (call["status"], call["attempts"]) == ("ok", 2)
    assert_saved_step_not_asked_again(k)


def test_retry_at_a_checkpoint_pairs_its_calls_before_the_message(db_url: str, tmp_path: Path) -> None:
    k = kit(db_url, tmp_path, "sequential")
    first = k.start().result
    assert first is not None and first["status"] == "completed"
    out = k.entry("retry", message="start over", checkpoint=_append_checkpoint(first))
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]
    # the calls had recorded results: they keep them (never doubted); the later steps are superseded
    assert all(c["status"] == "ok" for c in out.result["calls"] if c["step"] == 0)
    assert any(c["superseded"] for c in out.result["checkpoints"])
    assert k.bodies() == {"seq_unsafe": 1, "seq_b": 1}
    assert transcript_problems(db_url, k.session) == []


@pytest.mark.kills
def test_dbos_compat_profile_reruns_nothing_but_remote_children(db_url: str, tmp_path: Path) -> None:
    """The seed's DBOS row: a safe tool is not run again; it is paired outcome_unknown."""
    k = kit(db_url, tmp_path, "safe")
    k.crash("after_body:safe_set", recovery="dbos_compat")
    result = k.wake(recovery="dbos_compat").result
    assert result is not None and result["status"] == "completed"
    call = calls_by_tool(result)["safe_set"]
    assert (call["status"], call["attempts"]) == ("outcome_unknown", 1)
    assert k.bodies()["safe_set"] == 1
    assert [b["dispatch_id"] for b in k.lines("bodies")] == [None]  # no dispatch id under dbos_compat
