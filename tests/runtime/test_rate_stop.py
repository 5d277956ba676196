"""A stop requested while a run waits for its model-request rate asks the model no more.

Over its agent's ``model_requests`` rate a request waits (it never fails), possibly a whole period.
The stop record was read only before the wait, so a stop that came during it was honoured after
one more model request, paid for nothing. The wait now reads the stop after each sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.ledger import rate
from tests.support.crashkit import helix_table, query

PERIOD = 20.0


def test_a_stop_during_the_rate_wait_asks_the_model_no_more(db_url: str, make_runtime: Callable[..., hx.Runtime], monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    refused: list[str | None] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append("asked")
        return ModelResponse(parts=[TextPart("hello")])

    real_try_grant = rate.try_grant

    def try_grant(conn: Any, key: str, limit: int, period: float, run_id: str | None = None) -> rate.Grant:
        """The real grant, watched: the test learns when a request was refused and waits."""
        grant = real_try_grant(conn, key, limit, period, run_id)
        if grant.epoch is None:
            refused.append(run_id)
        return grant

    monkeypatch.setattr(rate, "try_grant", try_grant)
    agent = hx.Agent("limited", FunctionModel(reply))
    rt = make_runtime([agent], limits={"limited": hx.AgentLimits(model_requests=(1, PERIOD))})
    first = rt.start("limited", "one").result(timeout=60)  # takes the period's one grant
    assert first.status == "completed" and asked == ["asked"]
    waiting = rt.start("limited", "two")
    deadline = time.monotonic() + 60
    while waiting.run_id not in refused:  # refused: it now waits for the period's end
        assert time.monotonic() < deadline, "the second run was never refused a grant"
        time.sleep(0.05)
    began = time.monotonic()
    rt.stop(waiting.session_id, kind="interrupt")
    result = waiting.result(timeout=PERIOD + 60)
    assert result.status == "interrupted", result
    assert asked == ["asked"], "the model was asked after the stop"
    assert time.monotonic() - began < PERIOD - 5, "the stop waited for the rate's period"
    grants = query(db_url, f"SELECT run_id FROM {helix_table(db_url, 'rate_grants')}")
    assert [r["run_id"] for r in grants] == [first.run_id]  # the stopped run never took a grant
