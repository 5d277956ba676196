"""Causes kept: where a failure becomes data, its traceback is logged once, and
the exception logged is the one that was raised (not a copy that lost its ``__cause__``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.runtime.flow import reconcile, workflow


class ModelBroke(Exception):
    """Not a provider error: the run fails ``run_error`` at once (no retry)."""


def _tracebacks_of(caplog: pytest.LogCaptureFixture, kind: type[BaseException]) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], kind)]


def test_a_run_error_logs_its_traceback_once(make_runtime: Any, caplog: pytest.LogCaptureFixture) -> None:
    raised: list[BaseException] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        try:
            raise ModelBroke("the model broke") from KeyError("the provider's own error")
        except ModelBroke as exc:
            raised.append(exc)
            raise

    rt = make_runtime([hx.Agent(name="broken", model=FunctionModel(reply), tools=[])])
    with caplog.at_level(logging.DEBUG, logger="helix_dbos"):
        result = rt.start("broken", "go").result(timeout=60)
    assert result.status == "failed" and result.error_code == "run_error" and "the model broke" in (result.error or ""), result
    (record,) = _tracebacks_of(caplog, ModelBroke)  # once, not once per layer it passed through
    assert record.exc_info is not None and record.exc_info[1] is raised[0]
    assert isinstance(raised[0].__cause__, KeyError) and result.run_id in record.getMessage()


def test_reconcile_checks_that_fail_before_a_failure_log_their_traceback(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The failure is written whatever happened to the checks; why they were not asked is in the
    log with its traceback (it was one line with the message only)."""
    broke = RuntimeError("the checks' read failed")

    async def ask_before(registry: Any, run_id: str, read: Any) -> int:
        raise broke

    monkeypatch.setattr(reconcile, "ask_before", ask_before)
    with caplog.at_level(logging.WARNING, logger="helix_dbos"):
        asyncio.run(workflow._ask_before_failing(None, "run-1", "run_error"))  # type: ignore[arg-type]  # ask_before is replaced
    (record,) = _tracebacks_of(caplog, RuntimeError)
    assert record.exc_info is not None and record.exc_info[1] is broke and "run-1" in record.getMessage()
