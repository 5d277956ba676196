"""One run, one trace, across processes and kills, as a collector really receives it.

A real OTLP/HTTP receiver on loopback (``tests/support/otlp_receiver.py``) gets what a real child process
exports through ``HELIX_DBOS_OTLP_TRACES_ENDPOINTS``; the child is crashed at a fault point
(``HELIX_DBOS_CRASH_AT``: ``os._exit``, no flush, like a kill), SIGKILLed, SIGTERMed or SIGINTed from
outside, then relaunched. The batch exporter's timer is set to a minute, so whatever arrived before a
kill arrived because the runtime flushed it where a step's outcome was committed.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.proto")

from helix_dbos.runtime.process.tracing import trace_id_of
from tests.support.crashkit import Kit, transcript_problems
from tests.support.otlp_receiver import Received, Receiver, otlp_receiver, problems
from tests.support.procs import free_port


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as got:
        yield got


def traced_env(receiver: Receiver, **extra: str) -> dict[str, str]:
    """A child exporting to ``receiver``, whose batch exporter would wait a minute on its own."""
    return {"HELIX_DBOS_OTLP_TRACES_ENDPOINTS": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "60000", **extra}


def the_run(spans: list[Received]) -> tuple[Received, int]:
    """The run's root span and the run's trace id (derived from its run id, as every process derives it)."""
    roots = [s for s in spans if s.name == "helix.run" and s.scope == "helix_dbos"]
    assert len(roots) == 1, [(s.name, s.scope) for s in spans if s.name == "helix.run"]
    run_id = str(roots[0].attributes["helix.run_id"])
    return roots[0], trace_id_of(run_id)


def named(spans: list[Received], name: str) -> list[Received]:
    return [s for s in spans if s.name == name]


def has_root(spans: list[Received]) -> bool:
    return any(s.name == "helix.run" and s.scope == "helix_dbos" for s in spans)


def assert_one_trace(spans: list[Received]) -> int:
    """One trace (the run's), one root, no orphans, and nothing of DBOS's own spans."""
    root, trace_id = the_run(spans)
    assert problems(spans, trace_id) == []
    assert root.parent_id is None
    assert not [s.name for s in spans if s.scope == "dbos-tracer"], "DBOS's workflow/step spans were exported"
    return trace_id


@pytest.mark.kills
@pytest.mark.parametrize("point", ["after_append", "before_step_commit"])
def test_crash_at_a_fault_point_then_relaunch_is_one_trace(db_url: str, tmp_path: Path, receiver: Receiver, point: str) -> None:
    """Killed at ``point``, relaunched: one trace, one root, no orphans; the model request and append
    done before the kill arrived before it (flushed at the append's commit), and a body answered
    before the kill gets no second ``helix.body_attempt`` span from the recovery."""
    k = Kit(db_url, tmp_path)
    k.crash(point, extra_env=traced_env(receiver))
    before = receiver.snapshot()
    assert [s.attributes.get("helix.step") for s in named(before, "helix.model_request")] == [0], sorted(s.name for s in before)
    assert len(named(before, "helix.append")) == 1
    if point == "before_step_commit":  # every body answered before the kill: their spans arrived
        assert len(named(before, "helix.body_attempt")) == len(k.bodies()) == 6
        assert len(named(before, "scenario.body")) == 6  # the app's own spans inside the bodies too

    woke = k.wake(extra_env=traced_env(receiver))
    assert woke.result is not None and woke.result["status"] == "completed"
    spans = receiver.wait_for("the run's root span", has_root)
    assert_one_trace(spans)
    assert Counter(s.attributes["helix.step"] for s in named(spans, "helix.model_request")) == {0: 1, 1: 1}
    bodies = Counter(str(s.attributes["helix.dispatch_id"]) for s in named(spans, "helix.body_attempt"))
    assert bodies == Counter(line["dispatch_id"] for line in k.lines("bodies")), "a body span for work done before the crash"
    assert all(s.attributes.get("helix.decision") != "done" for s in named(spans, "helix.body_attempt"))
    assert transcript_problems(db_url, k.session) == []


def _spawn_slow_pair(k: Kit, receiver: Receiver) -> tuple[object, list[Received]]:
    proc = k.spawn("start", extra_env=traced_env(receiver, SCENARIO_DELAY="30"))
    deadline = time.monotonic() + 60
    while len(k.lines("bodies")) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "both slow bodies to start"
        time.sleep(0.05)
    # the model request and the append were committed before the bodies started: flushed then
    receiver.wait_for("the append's span, flushed at its commit", lambda s: bool(named(s, "helix.append")))
    return proc, receiver.snapshot()


@pytest.mark.kills
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: signal.Signals(s).name)
def test_signal_mid_body_then_relaunch_is_one_trace(db_url: str, tmp_path: Path, receiver: Receiver, sig: int) -> None:
    """A safe and an unsafe body in flight when the process is signalled, then relaunched: one
    trace, no orphans. SIGTERM and SIGINT flush what had ended (the app's own spans inside the
    bodies); a SIGKILL loses them, and nothing of theirs arrives half (no orphan)."""
    k = Kit(db_url, tmp_path, scenario="slow_pair")
    proc, before = _spawn_slow_pair(k, receiver)
    assert [s.attributes.get("helix.step") for s in named(before, "helix.model_request")] == [0]
    time.sleep(0.2)  # the bodies' own spans have ended; no commit has flushed them
    proc.send_signal(sig)  # type: ignore[attr-defined]
    proc.wait(30)  # type: ignore[attr-defined]
    if sig != signal.SIGKILL:
        got = receiver.wait_for("the bodies' spans, flushed at the signal", lambda s: len(named(s, "scenario.body")) == 2)
        assert {s.attributes["tool"] for s in named(got, "scenario.body")} == {"slow_safe", "slow_unsafe"}

    woke = k.wake(extra_env=traced_env(receiver, SCENARIO_DELAY="0"))
    assert woke.result is not None and woke.result["status"] == "completed"
    spans = receiver.wait_for("the run's root span", has_root)
    assert_one_trace(spans)
    assert Counter(s.attributes["helix.step"] for s in named(spans, "helix.model_request")) == {0: 1, 1: 1}
    assert len(named(spans, "helix.append")) == 1
    assert transcript_problems(db_url, k.session) == []


@pytest.mark.kills
def test_mcp_listing_and_call_spans_sit_under_the_run_root_across_a_sigkill(
    db_url: str, tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An MCP toolset over stdio, the app SIGKILLed with both calls in flight and relaunched (not three
    traces and two orphans): the tool listing's and the calls' spans (fastmcp's and
    the MCP SDK's) are in the run's trace, under its root, with no parent missing."""
    pytest.importorskip("fastmcp")
    from tests.processes.test_mcp import kill_mid_calls

    for name, value in traced_env(receiver).items():
        monkeypatch.setenv(name, value)  # the app children inherit it (tests/support/procs.child_env)
    out = kill_mid_calls(db_url, tmp_path, "stdio", "mcp_app")
    assert out["status"] == "completed"
    spans = receiver.wait_for("the run's root span", has_root)
    trace_id = assert_one_trace(spans)
    mcp = [s for s in spans if s.scope in ("fastmcp", "mcp-python-sdk") or s.name.startswith(("tools/", "MCP "))]
    seen = f"spans {sorted({(s.name, s.scope) for s in spans})}, calls {out['calls']}"
    assert any(s.name == "tools/list" for s in mcp), seen
    calls = {c["tool"]: c for c in out["calls"]}
    if calls["read_stock"]["attempts"] == 2:  # the relaunch ran it again (the killed call's span never ended)
        assert any(s.name == "tools/call read_stock" for s in mcp), seen
    assert all(s.trace_id == trace_id for s in mcp)
    root, _ = the_run(spans)
    by_id = {s.span_id: s for s in spans}
    for s in mcp:  # each one's chain of parents ends at the run's root
        node = s
        while node.parent_id is not None:
            node = by_id[node.parent_id]
        assert node is root


def test_a_collector_that_is_down_costs_a_run_at_most_one_flush_wait(make_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit flushes, but a collector that refuses connections does not make each commit
    wait: the first flush that overruns ``FLUSH_WAIT`` stops the waiting until a flush ends."""

    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    import helix_dbos as hx
    from helix_dbos.runtime.process import trace_export

    port = free_port()  # nobody listens on it: connection refused
    monkeypatch.setenv(trace_export.ENV, f"http://127.0.0.1:{port}/v1/traces")

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) < 3:
            return ModelResponse(parts=[ToolCallPart("look", {"key": "a"}), ToolCallPart("look", {"key": "b"})])
        return ModelResponse(parts=[TextPart("done")])

    @hx.tool(replay="safe")
    def look(key: str) -> str:
        return key

    rt = make_runtime([hx.Agent("unheard", FunctionModel(reply), tools=[look])])
    started = time.monotonic()
    result = rt.start("unheard", "go").result(timeout=120)
    took = time.monotonic() - started
    assert result.status == "completed"
    # ~17 commits and result writes each flush; waiting for each would take over 30 s
    assert took < 4 * trace_export.FLUSH_WAIT + 5, f"the run took {took:.1f} s"
