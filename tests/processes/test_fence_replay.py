"""A fence refusal is recognised by type, also when DBOS replays it from its record.

helix's DBOS serializer is portable JSON: DBOS records a step's error as its name, message, code
and ``data``, and a replay raises a ``dbos.PortableWorkflowError`` in its place. The refusal's typed
record in ``data`` (``RunFencedError.data``) is what ``fence.refusal`` rebuilds it from; a class
name or a message that merely reads like a refusal is never taken for one.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest
from dbos import PortableWorkflowError

from helix_dbos.errors import ConflictError, RunFencedError
from helix_dbos.runtime.floor import fence
from tests.support.procs import child_env, run_module, spawn_module
from tests.support.effects import read_effects


@pytest.mark.kills
def test_a_refusal_replayed_from_dboss_record_is_still_a_refusal(db_url: str, tmp_path: Path) -> None:
    folder, executor, session = tmp_path / "effects", f"fence-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    args = ["--db", db_url, "--effects", str(folder), "--executor", executor]
    folder.mkdir()
    with open(tmp_path / "first.stderr", "w") as log:
        first = spawn_module("tests.scenarios.fence_replay_app", [*args, "start", "--session", session], child_env(), stderr=log)
        try:
            deadline = time.monotonic() + 180  # a launch and a whole run on a loaded machine
            while not read_effects(folder, "caught") and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert read_effects(folder, "caught"), f"the probe never caught its refusal (exit {first.poll()}): {(tmp_path / 'first.stderr').read_text()[-3000:]}"
        finally:
            first.send_signal(signal.SIGKILL)  # killed while the probe waits: DBOS holds it PENDING
            first.wait(timeout=30)

    (folder / "release").touch()
    woken = run_module("tests.scenarios.fence_replay_app", [*args, "wake", "--session", session], child_env(), timeout=180)
    assert woken.code == 0 and woken.result == {"probe": "released"}, woken.stderr[-3000:]

    fresh, replayed = read_effects(folder, "caught")
    assert len(read_effects(folder, "step_bodies")) == 1, "the relaunch ran the refused step again instead of replaying its record"
    assert fresh["class"] == "helix_dbos.errors.RunFencedError" and fresh["is_fenced"]
    # The replay is DBOS's record of the refusal, not the refusal itself: its class is gone...
    assert replayed["pid"] != fresh["pid"]
    assert replayed["class"] == f"{PortableWorkflowError.__module__}.PortableWorkflowError", replayed
    # ...and the fence still knows it, as the same typed refusal.
    assert replayed["is_fenced"]
    assert replayed["refusal"] == fresh["refusal"], (fresh, replayed)
    assert fresh["refusal"]["class"] == "RunFencedError" and fresh["refusal"]["detail"]["operation"] == "probe"


class RunFencedErrorLookalike(Exception):
    """An unrelated error whose class name carries the refusal's name."""


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("RunFencedError: a message that only reads like a refusal"),
        RunFencedErrorLookalike("refused"),
        ConflictError("RunFencedError: another conflict"),
        # what DBOS gives back for an unrelated error recorded under a lookalike name and message
        PortableWorkflowError("RunFencedError: refused", "RunFencedError", None, None),
        PortableWorkflowError("refused", "ValueError", None, {"other": {"message": "x"}}),
    ],
    ids=["message", "class-name", "other-conflict", "portable-name-and-message", "portable-other-data"],
)
def test_an_unrelated_error_that_reads_like_a_refusal_is_not_one(exc: Exception) -> None:
    assert not fence.is_fenced(exc)
    assert fence.refusal(exc) is None
    try:
        raise RuntimeError("wrapped") from exc
    except RuntimeError as outer:
        assert not fence.is_fenced(outer)


def test_a_refusal_is_found_through_its_causes() -> None:
    refused = RunFencedError("append refused: run 'r' is no longer running", detail={"run_id": "r", "operation": "append"})
    try:
        try:
            raise refused
        except RunFencedError as inner:
            raise RuntimeError("the transaction failed") from inner
    except RuntimeError as outer:
        assert fence.refusal(outer) is refused


def test_the_record_dbos_keeps_rebuilds_the_refusal() -> None:
    """``data`` is the refusal's typed record, and ``from_record`` reads it back whole."""
    refused = RunFencedError("probe refused: x", detail={"run_id": "r", "operation": "probe"})
    back = RunFencedError.from_record(refused.data)
    assert isinstance(back, RunFencedError) and (back.message, back.detail) == (refused.message, refused.detail)
    assert RunFencedError.from_record(None) is None
    assert RunFencedError.from_record({RunFencedError.RECORD_KEY: "not a record"}) is None

