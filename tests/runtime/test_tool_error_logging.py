"""A tool's expected error is one WARNING line; its traceback only at DEBUG; the runtime's own failures at ERROR.

A tool that raises ("slot 9am is taken") is answering the model, as docs/writing-tools.md's
``book_slot`` does: the demo printed a screen of traceback for it on stderr. The line names the
tool, the dispatch id and the error; the traceback is still there at DEBUG (and the exception the
log holds is the body's own, with the body's frame in it). A failure of the runtime's code around a
transactional body is not the tool's answer: it keeps its traceback, at ERROR.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import helix_dbos as hx
from helix_dbos.runtime.flow import transactional
from tests.conftest import one_database

meta = sa.MetaData()
bookings = sa.Table(
    "log_bookings", meta,
    sa.Column("dispatch_id", sa.String(64), primary_key=True),
    sa.Column("slot", sa.String(32), nullable=False),
)


@hx.tool(transactional=True)
def book_slot(ctx: hx.ToolContext, slot: str) -> dict[str, str]:
    """Book a slot for the user (docs/writing-tools.md's example)."""
    conn = ctx.require_connection()
    if conn.execute(sa.select(bookings.c.slot).where(bookings.c.slot == slot)).first():
        raise ValueError(f"slot {slot} is taken")
    conn.execute(bookings.insert().values(dispatch_id=ctx.require_dispatch_id(), slot=slot))
    return {"booked": slot}


@hx.tool
async def send_note(ctx: hx.ToolContext, to: str) -> str:
    """Send a note (an async, plain tool)."""
    raise PermissionError(f"{to} does not take notes\nsecond line")


def model_calling(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{i}") for i, (name, args) in enumerate(calls)])
        results = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=[TextPart("; ".join(str(p.content) for p in results) or "done")])

    return FunctionModel(answer)


def _records(caplog: pytest.LogCaptureFixture, needle: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "helix_dbos" and needle in r.getMessage()]


def _body_frames(exc: BaseException) -> list[str]:
    tb = exc.__traceback__
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


@one_database  # what is logged, not what is stored
def test_a_tool_error_is_one_warning_line_and_its_traceback_is_at_debug(make_runtime: Any, caplog: pytest.LogCaptureFixture) -> None:
    rt = make_runtime([hx.Agent("logging_tools", model_calling(("book_slot", {"slot": "9am"}), ("book_slot", {"slot": "9am"}),
                                                               ("send_note", {"to": "ann"})), tools=[book_slot, send_note])])
    meta.create_all(rt.engine)
    with caplog.at_level(logging.DEBUG, logger="helix_dbos"):
        result = rt.start("logging_tools", "book 9am twice, and tell ann").result(timeout=120)
    assert result.status == "completed", result
    calls = {c.tool_call_id: c for c in rt.session(result.session_id).calls}
    assert sorted(c.status for c in calls.values()) == ["error", "error", "ok"]
    taken = next(c for c in calls.values() if c.tool_name == "book_slot" and c.status == "error")
    note = calls["c2"]

    for call, line in ((taken, "raised ValueError: slot 9am is taken"), (note, "raised PermissionError: ann does not take notes second line")):
        warnings = [r for r in _records(caplog, call.dispatch_id) if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in _records(caplog, call.dispatch_id)]
        (warning,) = warnings
        message = warning.getMessage()
        assert line in message and repr(call.tool_name) in message and "\n" not in message, message
        assert warning.exc_info is None and warning.exc_text is None  # no traceback at WARNING
        debug = [r for r in _records(caplog, call.dispatch_id) if r.levelno == logging.DEBUG and r.exc_info]
        assert len(debug) == 1, [r.getMessage() for r in _records(caplog, call.dispatch_id)]
        exc = debug[0].exc_info[1]  # type: ignore[index]
        assert type(exc).__name__ == line.split("raised ")[1].split(":")[0]
        assert ("book_slot" if call.tool_name == "book_slot" else "send_note") in _body_frames(exc)  # the body's own traceback
    assert not [r for r in caplog.records if r.name == "helix_dbos" and r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.name == "helix_dbos" and r.levelno == logging.WARNING and r.exc_info]


@one_database  # what is logged, not what is stored
def test_the_runtimes_own_failure_around_a_body_keeps_its_traceback_at_error(make_runtime: Any, caplog: pytest.LogCaptureFixture,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug of ours after a transactional body (played by the crash point right after it raising
    once) is not the tool's error: ERROR, with the traceback; the body's writes still roll back."""
    rt = make_runtime([hx.Agent("logging_ours", model_calling(("book_slot", {"slot": "10am"})), tools=[book_slot])])
    meta.create_all(rt.engine)
    raised: list[str] = []

    def broken(point: str, tool: str | None = None) -> None:
        if point == "after_body" and not raised:
            raised.append(point)
            raise RuntimeError("a bug in the runtime after the body")

    monkeypatch.setattr(transactional, "crash_point", broken)
    with caplog.at_level(logging.DEBUG, logger="helix_dbos"):
        result = rt.start("logging_ours", "book 10am").result(timeout=120)
    assert raised and result.status == "completed", result
    (call,) = rt.session(result.session_id).calls
    assert call.status == "error"
    with rt.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(bookings)).scalar() == 0
    errors = [r for r in _records(caplog, call.dispatch_id) if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None, [r.getMessage() for r in _records(caplog, call.dispatch_id)]
    assert "RuntimeError: a bug in the runtime after the body" in errors[0].getMessage()
    assert not [r for r in _records(caplog, call.dispatch_id) if r.levelno == logging.WARNING]
