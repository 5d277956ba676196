"""The over-the-wire crash scenarios under OpenAI's Agents SDK with its DBOS integration
(``dbos-openai-agents``, ``DBOSRunner``, its defaults): the same cashier (``tests/scenarios/oai_peer_app.py``),
the SDK's own model classes over HTTP to the test's provider. What ran is counted by the bodies
outside the runtime, what the model was told is read at the provider. These are the peer's cells of
the side-by-side table in docs/openai-agents.md; helix's cells come from the same scenarios run
through helix (``tests/processes/test_model_over_http_crashes.py``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support.waiting import wait_for
from tests.support.provider_server import Held, Text, provider_server
from tests.processes.test_model_over_http_crashes import STEP1, App, kill, killed_mid_charge, step_of, tool_results

pytest.importorskip("dbos_openai_agents")

PEER = "oai_peer_app"


@pytest.mark.kills
@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_oai_peer_killed_mid_unsafe_body_runs_it_again_and_tells_the_model_it_succeeded(pg_url: str, tmp_path: Path, wire: str) -> None:
    """Killed while ``charge`` blocks mid-body: the peer recorded nothing that the body started (its
    function tools are workflow code), so the relaunch runs ``charge`` again, and the model reads
    "charged 5 to c1" as if it ran once. The step-1 request is a recorded step: not asked again."""
    # The SDK gathers the two tool calls: ``lookup`` may not have begun when ``charge`` blocks, so
    # the kill waits for both, or "ran again" would be a race on the scheduler.
    app, out, requests = killed_mid_charge(pg_url, tmp_path, wire, started=("charge", "lookup"), module=PEER)
    assert out is not None and out["status"] == "completed" and out["output"] == "done", out
    assert [step_of(r) for r in requests] == [0, 1]
    assert app.bodies() == Counter({"charge": 2, "lookup": 2})
    assert tool_results(requests[1].body, wire) == {0: "charged 5 to c1", 1: "c1: active"}


@pytest.mark.kills
def test_oai_peer_killed_with_the_next_request_in_flight_runs_both_bodies_again(pg_url: str, tmp_path: Path) -> None:
    """Killed while the step-2 request is held at the provider: step 1's reply is a recorded step and
    is not asked again, step 2 is; both tool bodies, finished before the kill, run again on the
    replay (2 each), and the model is told each ran once."""
    with provider_server() as server:
        held = Held(Text("done", usage=(190, 23)))
        server.script(STEP1, held)
        server.always(Text("done", usage=(200, 30)))
        app = App(pg_url, tmp_path, server.root, "chat", module=PEER)
        proc = app.spawn()
        wait_for("the step-2 request at the provider", lambda: app.alive(proc) and len(server.requests()) == 2)
        kill(proc)
        held.release.set()
        out = app.wake().result
        requests = server.requests()
    assert out is not None and out["status"] == "completed" and out["output"] == "done", out
    assert out["usage"] == [320, 47], out  # 120+200, 17+30: the answered requests
    assert [step_of(r) for r in requests] == [0, 1, 1]
    assert app.bodies() == Counter({"charge": 2, "lookup": 2})
    assert tool_results(requests[2].body, "chat") == {0: "charged 5 to c1", 1: "c1: active"}
