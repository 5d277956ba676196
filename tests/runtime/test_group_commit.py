"""Group commit's own rules (``runtime/floor/group_commit.py``), on a launched runtime and a real database.

Writes of one run issued in the same event-loop turn share one transaction; a write that raises
answers only for itself (its group is rolled back and re-run write by write); a write cancelled
before its group forms is never made; a cancelled runner still hands its siblings their outcomes; a
write cancelled as its outcome arrives leaves the next group to the write waiting behind it.
Each write here inserts a row into a scratch table, so what committed is read back afterwards.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos.runtime.floor import group_commit
from helix_dbos.runtime.floor.registry import Registry, serving, serving_registry


class Refused(Exception):
    """A write's own refusal (as the attempt fence refuses a late result)."""


def _insert(conn: sa.Connection, key: str, fail: bool = False, pause: float = 0.0) -> dict[str, Any]:
    conn.execute(sa.text("INSERT INTO gc_probe (k) VALUES (:k)"), {"k": key})
    if pause:
        time.sleep(pause)  # the transaction stays open (a worker thread): later writes queue behind it
    if fail:
        raise Refused(key)
    # Rows this transaction sees: its group's earlier writes, committed or not (one transaction).
    return {"seen": conn.execute(sa.text("SELECT COUNT(*) FROM gc_probe")).scalar_one(), "conn": id(conn)}


@dataclass
class Probe:
    """A launched runtime's registry (the one its launch made) and the probe table's committed keys."""

    registry: Registry

    def committed(self) -> list[str]:
        with self.registry.env.tx_engine.connect() as conn:
            return sorted(conn.execute(sa.text("SELECT k FROM gc_probe")).scalars())


@pytest.fixture
def launched(make_runtime: Callable[..., hx.Runtime]) -> Probe:
    rt = make_runtime([hx.Agent(name="probe", model=TestModel(), instructions="probe")])
    assert rt._launched is not None and rt._launched.runner is not None
    probe = Probe(rt._launched.runner.registry)
    with probe.registry.env.tx_engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE gc_probe (k VARCHAR(64) PRIMARY KEY)"))
    return probe


def _run(coro: Any, registry: Registry) -> Any:
    """On a fresh event loop in its own thread, as a workflow's loop is never the test's."""
    out: dict[str, Any] = {}

    def main() -> None:
        try:
            with serving(registry):  # what a workflow's entry sets: the registry its ledger operations use
                out["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = exc

    t = threading.Thread(target=main)
    t.start()
    t.join(60)
    assert not t.is_alive(), "group commit hung"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_writes_issued_together_share_one_transaction(launched: Probe) -> None:
    run = uuid.uuid4().hex

    async def main() -> list[dict[str, Any]]:
        return await asyncio.gather(*(group_commit.write(serving_registry(), run, "wf", _insert, k) for k in ("a", "b", "c")))

    outs = _run(main(), launched.registry)
    assert [o["seen"] for o in outs] == [1, 2, 3], outs  # each saw the ones before it, uncommitted
    assert len({o["conn"] for o in outs}) == 1, outs
    assert launched.committed() == ["a", "b", "c"]


def test_a_write_that_raises_answers_only_for_itself(launched: Probe) -> None:
    run = uuid.uuid4().hex

    async def main() -> list[Any]:
        return await asyncio.gather(
            group_commit.write(serving_registry(), run, "wf", _insert, "a"),
            group_commit.write(serving_registry(), run, "wf", _insert, "refused", True),
            group_commit.write(serving_registry(), run, "wf", _insert, "c"),
            return_exceptions=True,
        )

    a, refused, c = _run(main(), launched.registry)
    assert isinstance(refused, Refused) and str(refused) == "refused", refused
    assert isinstance(a, dict) and isinstance(c, dict), (a, c)
    # The group was rolled back and each write re-run alone: the siblings committed on their own.
    assert a["seen"] == 1 and c["seen"] == 2, (a, c)
    assert launched.committed() == ["a", "c"]


def test_a_write_cancelled_before_its_group_forms_is_never_made(launched: Probe) -> None:
    run = uuid.uuid4().hex

    async def main() -> tuple[Any, Any, Any]:
        first = asyncio.ensure_future(group_commit.write(serving_registry(), run, "wf", _insert, "first", False, 0.3))
        await asyncio.sleep(0.05)  # first's group is in flight (its transaction open in a thread)
        dropped = asyncio.ensure_future(group_commit.write(serving_registry(), run, "wf", _insert, "dropped"))
        kept = asyncio.ensure_future(group_commit.write(serving_registry(), run, "wf", _insert, "kept"))
        await asyncio.sleep(0.05)
        dropped.cancel()
        results = await asyncio.gather(first, dropped, kept, return_exceptions=True)
        return tuple(results)  # type: ignore[return-value]

    first, dropped, kept = _run(main(), launched.registry)
    assert isinstance(dropped, asyncio.CancelledError), dropped
    assert first["seen"] == 1 and kept["seen"] == 2, (first, kept)
    assert launched.committed() == ["first", "kept"]


def test_a_cancelled_runner_still_hands_its_siblings_their_outcomes(launched: Probe) -> None:
    run = uuid.uuid4().hex

    async def main() -> tuple[Any, Any]:
        runner = asyncio.ensure_future(group_commit.write(serving_registry(), run, "wf", _insert, "runner", False, 0.3))
        sibling = asyncio.ensure_future(group_commit.write(serving_registry(), run, "wf", _insert, "sibling", False, 0.3))
        await asyncio.sleep(0.1)  # both in one group, its transaction open
        runner.cancel()
        results = await asyncio.gather(runner, sibling, return_exceptions=True)
        return tuple(results)  # type: ignore[return-value]

    runner, sibling = _run(main(), launched.registry)
    assert isinstance(runner, asyncio.CancelledError), runner
    # The sibling was not cancelled: it gets its own write's outcome once the transaction ends.
    assert isinstance(sibling, dict) and sibling["seen"] == 2, sibling
    assert launched.committed() == ["runner", "sibling"]


def test_a_write_cancelled_as_its_outcome_arrives_leaves_the_next_group_alone(
    launched: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write whose group committed, cancelled before its task woke to take the outcome, is done
    with the queue: the next group (handed over to the write that waited behind it) runs as it would."""
    registry = launched.registry
    run = uuid.uuid4().hex
    tasks: dict[str, asyncio.Future[Any]] = {}
    deliver = group_commit._deliver_outcomes

    def deliver_then_cancel(*args: Any) -> Any:
        out = deliver(*args)
        if "sibling" in tasks:  # the first group's outcomes are handed out: its sibling is cancelled before it wakes
            tasks.pop("sibling").cancel()
        return out

    monkeypatch.setattr(group_commit, "_deliver_outcomes", deliver_then_cancel)

    async def main() -> tuple[Any, Any, Any]:
        runner = asyncio.ensure_future(group_commit.write(registry, run, "wf", _insert, "runner", False, 0.3))
        sibling = tasks["sibling"] = asyncio.ensure_future(group_commit.write(registry, run, "wf", _insert, "sibling"))
        deadline = time.monotonic() + 120
        while not (registry.group_queues and not next(iter(registry.group_queues.values())).waiting) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # poll until the first group has formed (its transaction open)
        after = asyncio.ensure_future(group_commit.write(registry, run, "wf", _insert, "next"))
        while not next(iter(registry.group_queues.values())).waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # poll until the next write waits behind the first group
        results = await asyncio.gather(runner, sibling, after, return_exceptions=True)
        return tuple(results)  # type: ignore[return-value]

    runner, sibling, after = _run(main(), registry)
    assert isinstance(sibling, asyncio.CancelledError), sibling
    assert runner["seen"] == 1, runner
    assert isinstance(after, dict) and after["seen"] == 3, after  # its own group ran, its own write in it
    assert launched.committed() == ["next", "runner", "sibling"]
    assert registry.group_queues == {}


def test_the_queues_are_the_launchs_own(launched: Probe) -> None:
    """A run's queue lives on the registry of the launch that runs it, never in a module table, so
    a second runtime in the process (after this one's shutdown) cannot find this one's queues."""
    registry = launched.registry
    run = uuid.uuid4().hex

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(group_commit.write(registry, run, "wf", _insert, "held", False, 0.3))
        deadline = time.monotonic() + 120
        while not registry.group_queues and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # poll until the write has queued
        keys = set(registry.group_queues)
        assert keys == {(id(loop), "wf", run)}, keys
        return await first

    out = _run(main(), launched.registry)
    assert out["seen"] == 1
    assert registry.group_queues == {}  # the queue goes with its last write
    assert not hasattr(group_commit, "_queues")
