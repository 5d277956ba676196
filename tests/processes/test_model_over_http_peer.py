"""The scenarios of ``test_model_over_http_crashes`` under Pydantic AI's own DBOS integration
(``DBOSDurability``, its defaults), with the same agent, tools and model class over HTTP
(``tests/scenarios/dbos_wire_app.py``): what ran, counted by the bodies, and what its model was
told, read at the provider. The measurements of the side-by-side table in docs/pydantic-ai.md
("Side by side over the wire"); helix's cells come from ``test_model_over_http_crashes``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from tests.support.procs import child_env, free_port, run_module
from tests.support.provider_server import Cut, Held, Status, Text, provider_server, read_log
from tests.processes.test_model_over_http_crashes import STEP1, App, kill, killed_mid_charge, step_of, tool_results
from tests.support.waiting import wait_for

pytest.importorskip("pydantic_ai.durable_exec.dbos")

PEER = "dbos_wire_app"


#: The peer's function tools as ``DBOSDurability`` leaves them (workflow code), or each a ``@DBOS.step``.
TOOLS = {"workflow": (), "step": ("--step-tools",)}


@pytest.mark.kills
@pytest.mark.parametrize("tools", list(TOOLS))
def test_peer_killed_with_the_next_request_in_flight(pg_url: str, tmp_path: Path, tools: str) -> None:
    """Killed while the step-2 request is held: its model requests are DBOS steps, so step 1 is not
    asked again and step 2 is. Its function tools are workflow code: both bodies, finished before the
    kill, run again on the replay (2 each; the model is told "charged 5 to c1" as if once); as
    ``@DBOS.step``s they are recorded and run once."""
    with provider_server() as server:
        held = Held(Text("done", usage=(190, 23)))
        server.script(STEP1, held)
        server.always(Text("done", usage=(200, 30)))
        app = App(pg_url, tmp_path, server.root, "chat", module=PEER, extra=TOOLS[tools])
        proc = app.spawn()
        wait_for("the step-2 request at the provider", lambda: app.alive(proc) and len(server.requests()) == 2)
        kill(proc)
        held.release.set()
        out = app.wake().result
        requests = server.requests()
    assert out == {"status": "completed", "output": "done", "usage": [320, 47]}, out  # 120+200, 17+30: the answered requests
    assert [step_of(r) for r in requests] == [0, 1, 1]
    runs = 2 if tools == "workflow" else 1
    assert app.bodies() == Counter({"charge": runs, "lookup": runs})
    assert tool_results(requests[2].body, "chat") == {0: "charged 5 to c1", 1: "c1: active"}


@pytest.mark.kills
@pytest.mark.parametrize("tools", list(TOOLS))
def test_peer_killed_mid_unsafe_body_runs_it_again_and_tells_the_model_it_succeeded(pg_url: str, tmp_path: Path, tools: str) -> None:
    """Killed while ``charge`` blocks mid-body: the relaunch runs ``charge`` again (2 bodies: nothing
    recorded that it started, workflow code or step alike), and the model reads "charged 5 to c1",
    as if it ran once."""
    app, out, requests = killed_mid_charge(pg_url, tmp_path, "chat", module=PEER, extra=TOOLS[tools])
    assert out == {"status": "completed", "output": "done", "usage": [320, 47]}, out
    assert [step_of(r) for r in requests] == [0, 1]
    assert app.bodies()["charge"] == 2
    assert tool_results(requests[1].body, "chat") == {0: "charged 5 to c1", 1: "c1: active"}


def _run_to_end(app: App, *extra: str) -> dict[str, object]:
    out = run_module(app.module, [*app.args, *extra, "start", "--session", app.session], child_env(), timeout=240)
    assert out.code == 0 and out.result is not None, out.stderr[-3000:]
    return out.result


def test_peer_fails_the_run_on_a_stream_cut_midway(pg_url: str, tmp_path: Path) -> None:
    """Streaming (an event stream handler, as helix's live output): the provider sends two events of
    the stream and closes the connection; the peer's defaults do not ask again, the run fails."""
    with provider_server() as server:
        server.script(Cut(Text("the whole answer"), events=2))
        server.always(Text("the whole answer"))
        app = App(pg_url, tmp_path, server.root, "chat", module=PEER)
        out = _run_to_end(app, "--live")
        requests = server.requests()
    assert out["status"] == "failed" and str(out["error"]).startswith("ModelConnectionError"), out
    assert len(requests) == 1 and requests[0].body.get("stream") is True


def test_peer_fails_the_run_on_three_500s(pg_url: str, tmp_path: Path) -> None:
    """Three 500s, then a reply the peer never asks for: the SDK's own 2 retries are its only budget."""
    with provider_server() as server:
        server.script(*[Status(500, headers={"retry-after-ms": "100"})] * 3)
        server.always(Text("done"))
        app = App(pg_url, tmp_path, server.root, "chat", module=PEER)
        out = _run_to_end(app)
        requests = server.requests()
    assert out["status"] == "failed" and str(out["error"]).startswith("ModelServerError: status_code: 500"), out
    assert len(requests) == 3


def test_peer_fails_the_run_when_the_provider_is_down(pg_url: str, tmp_path: Path) -> None:
    """Connection refused (nothing listens on the port): the run fails after the SDK's retries, with
    the connection error as it is (no typed code)."""
    app = App(pg_url, tmp_path, f"http://127.0.0.1:{free_port()}", "chat", module=PEER)
    out = _run_to_end(app)
    assert out == {"status": "failed", "error": "ModelConnectionError: Connection error."}, out


@pytest.mark.kills
def test_peer_fails_the_run_when_the_provider_is_killed_and_restarted_mid_run(pg_url: str, tmp_path: Path) -> None:
    """The provider SIGKILLed while it holds the step-2 request and back on its port 3 s later
    (``OUTAGE``): the SDK's 2 retries (about 1.5 s of waits) are spent before it is back; the run
    fails ``ModelConnectionError``, where helix's default budget rides it out."""
    from tests.support.procs import last_json
    from tests.processes.test_model_over_http_crashes import provider_killed_mid_run

    port, log = free_port(), tmp_path / "provider.jsonl"
    step1 = {"calls": [["charge", {"card": "c1", "amount": 5}], ["lookup", {"card": "c1"}]], "usage": [120, 17]}
    outage = provider_killed_mid_run(port, log, [step1, {"held": {"text": "lost"}}])
    next(outage)
    try:
        app = App(pg_url, tmp_path, f"http://127.0.0.1:{port}", "chat", module=PEER)
        proc = app.spawn()
        next(outage)
        stdout, _ = proc.communicate(timeout=240)
    finally:
        outage.close()
    out = last_json(stdout)
    assert out is not None and out["status"] == "failed" and str(out["error"]).startswith("ModelConnectionError"), out
    assert len(read_log(str(log))) == 2  # the provider back after OUTAGE s never saw a request
