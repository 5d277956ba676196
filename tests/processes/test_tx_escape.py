"""A transactional body that commits its own transaction (past ``ctx.connection``, through the driver)
is never run again and never reported as failed.

The body reaches the transaction's commit three ways: SQLAlchemy's root connection behind its result
(``result.context.root_connection``), the driver's connection behind the result's cursor
(``result.cursor.connection``), and the runtime's connection found on the frame stack; on SQLite it
first turns the runtime's authorizer off through the driver connection. The call's marker, written in
the transaction before the body, commits with the effect: the live process answers the call
``outcome_unknown`` with ``transaction_escaped``, and a process killed after the body is recovered
the same way, without running the body again. Effects are counted in the body's own table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.crashkit import Kit, calls_by_tool, query, transcript_problems

ROUTES = ["root", "cursor", "frames"]


def _rows(db_url: str, dispatch_id: str) -> int:
    return int(query(db_url, "SELECT count(*) AS n FROM scenario_tx_effects WHERE dispatch_id = :d", d=dispatch_id)[0]["n"])


def _escaped_answer(call: dict[str, object]) -> None:
    assert call["status"] == "outcome_unknown", call
    assert str(call["note"]).startswith("transaction_escaped:"), call


@pytest.mark.parametrize("route", ROUTES)
def test_a_body_that_commits_its_own_transaction_is_answered_outcome_unknown(db_url: str, tmp_path: Path, route: str) -> None:
    k = Kit(db_url, tmp_path, scenario="tx_escape")
    out = k.start(extra_env={"SCENARIO_ESCAPE": route})
    assert out.code == 0 and out.result is not None and out.result["status"] == "completed", out.stderr[-3000:]
    call = calls_by_tool(out.result)["tx_escape"]
    _escaped_answer(call)
    assert _rows(db_url, str(call["dispatch_id"])) == 1
    assert k.bodies()["tx_escape"] == 1
    assert "[SQL:" not in str(out.result)
    assert transcript_problems(db_url, k.session) == []
    later = k.entry("turn", message="again", extra_env={"SCENARIO_ESCAPE": route})
    assert later.code == 0 and later.result is not None and later.result["status"] == "completed", later.stderr[-3000:]


@pytest.mark.kills
@pytest.mark.parametrize("route", ROUTES)
def test_a_body_that_committed_its_own_transaction_is_never_run_again_after_a_kill(db_url: str, tmp_path: Path, route: str) -> None:
    """Killed right after the body returned (its effect committed, no result): the relaunch answers
    the call from the committed marker, ``outcome_unknown``, and the body never runs again."""
    k = Kit(db_url, tmp_path, scenario="tx_escape")
    k.crash("after_body:tx_escape", extra_env={"SCENARIO_ESCAPE": route})
    [escaped] = k.lines("escaped")
    dispatch_id = escaped["dispatch_id"]
    assert _rows(db_url, dispatch_id) == 1  # the body's own commit went through before the kill
    out = k.wake(extra_env={"SCENARIO_ESCAPE": route})
    assert out.result is not None and out.result["status"] == "completed", out.stderr[-3000:]
    call = calls_by_tool(out.result)["tx_escape"]
    _escaped_answer(call)
    assert call["attempts"] == 1
    assert _rows(db_url, dispatch_id) == 1  # exactly one effect for the dispatch id
    assert k.bodies()["tx_escape"] == 1 and k.model_steps()[0] == 1
    assert transcript_problems(db_url, k.session) == []
