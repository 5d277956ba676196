"""An OpenAI Agents SDK agent's guardrails and spans across a real SIGKILL and relaunch (both databases).

The scenario app's SDK agent (``SCENARIO_SDK=openai_agents``) with an input and an output guardrail
that count every run of theirs in the effects files (``SCENARIO_GUARDRAILS=1``), outside the
runtime: killed with both slow bodies in flight (the first step's reply, with its input guardrail's
result, recorded before them), then relaunched.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.crashkit import Kit, helix_table, query, transcript_problems
from tests.support.waiting import wait_for


@pytest.fixture(autouse=True)
def sdk_agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every process the test starts runs the scenario's SDK agent, with its counted guardrails."""
    monkeypatch.setenv("SCENARIO_SDK", "openai_agents")
    monkeypatch.setenv("SCENARIO_GUARDRAILS", "1")
    yield


def _kill_mid_bodies(k: Kit, extra_env: dict[str, str] | None = None) -> None:
    """Start the run, wait until both slow bodies started, SIGKILL the process."""
    proc = k.spawn("start", extra_env={"SCENARIO_DELAY": "30", **(extra_env or {})})
    wait_for("both slow bodies to start", lambda: len(k.lines("bodies")) >= 2 or proc.poll() is not None, timeout=120)
    assert proc.poll() is None, "the app ended before its bodies started"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def _ran(k: Kit) -> list[tuple[str, int]]:
    return [(line["guardrail"], line["pid"]) for line in k.lines("guardrails")]


@pytest.mark.kills
def test_a_guardrail_that_ran_before_a_kill_is_not_run_again(db_url: str, tmp_path: Path) -> None:
    """The input guardrail ran once, in the killed process, before the first request; the relaunch
    reads its recorded result and runs it no more. The output guardrail runs once, in the relaunch,
    on the final text. Both results are in the session's ``guardrail`` events."""
    k = Kit(db_url, tmp_path, scenario="slow_pair")
    _kill_mid_bodies(k)
    ((name, killed),) = _ran(k)
    assert name == "input_check"

    woke = k.wake(extra_env={"SCENARIO_DELAY": "0"})
    assert woke.result is not None and woke.result["status"] == "completed", woke.result
    ran = _ran(k)
    assert Counter(name for name, _ in ran) == {"input_check": 1, "output_check": 1}, ran
    assert ran[0] == ("input_check", killed) and ran[1][1] != killed
    assert k.lines("guardrails")[1]["given"] == woke.result["output"]
    assert k.bodies() == {"slow_safe": 2, "slow_unsafe": 1}  # the contract held around them
    events = query(db_url, f"SELECT data FROM {helix_table(db_url, 'events')} WHERE session_id = :s AND type = 'guardrail' ORDER BY seq", s=k.session)
    shown = [_data(e["data"]) for e in events]
    assert [(d["stage"], d["guardrail"], d["tripwire"]) for d in shown] == [("input", "input_check", False), ("output", "output_check", False)]
    assert shown[0]["step"] == 0 and shown[0]["output_info"] == {"length": len(k.lines("guardrails")[0]["given"])}
    assert transcript_problems(db_url, k.session) == []


def _data(value: Any) -> dict[str, Any]:
    import json

    return value if isinstance(value, dict) else json.loads(value)


@pytest.mark.kills
def test_the_sdks_spans_are_in_the_runs_one_trace_across_a_sigkill(db_url: str, tmp_path: Path) -> None:
    """Killed mid-body and relaunched, as a collector receives it: the SDK's agent, guardrail and
    function spans (instrumentation scope ``openai_agents``) are in the run's trace, each chain of
    parents ending at the run's root; the input guardrail's span arrived before the kill (flushed at
    the append's commit) and no second one after it."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from tests.processes.test_trace_kill import assert_one_trace, has_root, the_run, traced_env
    from tests.support.otlp_receiver import otlp_receiver

    with otlp_receiver() as receiver:
        k = Kit(db_url, tmp_path, scenario="slow_pair")
        _kill_mid_bodies(k, traced_env(receiver))
        before = receiver.wait_for("the input guardrail's span", lambda s: any(x.name == "agents.guardrail input_check" for x in s))
        assert not [s.name for s in before if s.name.startswith("agents.function")], "a body in flight at the kill has no span"

        woke = k.wake(extra_env=traced_env(receiver, SCENARIO_DELAY="0"))
        assert woke.result is not None and woke.result["status"] == "completed"
        spans = receiver.wait_for("the run's root span", has_root)
    trace_id = assert_one_trace(spans)
    sdk = [s for s in spans if s.scope == "openai_agents"]
    names = Counter(s.name for s in sdk)
    assert names["agents.guardrail input_check"] == 1 and names["agents.guardrail output_check"] == 1, names
    assert names["agents.function slow_safe"] == 1 and names["agents.function slow_unsafe"] == 0, names  # the unsafe one is not run again
    assert names["agents.agent crashy"] >= 3, names  # the guardrails', the requests' and the body's
    assert all(s.trace_id == trace_id for s in sdk)
    (guard,) = [s for s in sdk if s.name == "agents.guardrail output_check"]
    assert guard.attributes["openai_agents.triggered"] is False
    root, _ = the_run(spans)
    by_id = {s.span_id: s for s in spans}
    for s in sdk:  # each one's chain of parents ends at the run's root
        node = s
        while node.parent_id is not None:
            node = by_id[node.parent_id]
        assert node is root, s.name
