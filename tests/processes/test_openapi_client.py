"""The published OpenAPI document generates a client that works, with software nobody here wrote.

openapi-python-client (a test dependency) generates a Python client from the live service's
``/openapi.json``; the test imports it and drives whole sessions through it against a real uvicorn
process on SQLite and on Postgres: start, poll, approve, submit a client result, resume, retry,
stop, and read the events as the stream the route declares (``text/event-stream``, handed over as
text, never parsed as JSON). A generator warning (an endpoint it dropped) fails the test.

The schema rules that make this hold are checked on their own, without a database: short, stable
operation ids, SSE routes that declare only ``text/event-stream``, no security on what is served
without authentication, and no ``default`` beside a body's ``oneOf``.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from helix_dbos import apikeys
from tests.conftest import one_database
from tests.processes.test_service import Service, services  # noqa: F401 (services is a fixture)

BIN = Path(sys.executable).parent
KEY = apikeys.new_key()
KEYS_ENV = {apikeys.ENV: apikeys.entry_line(KEY, "alice")}

#: Every operation's id: what a generated client names its functions. Changing one breaks clients.
OPERATION_IDS = {
    ("get", "/healthz"): "health",
    ("get", "/executors"): "list_executors",
    ("get", "/agents"): "list_agents",
    ("get", "/sessions"): "list_sessions",
    ("post", "/sessions"): "start_session",
    ("get", "/sessions/{session_id}"): "get_session",
    ("post", "/sessions/{session_id}/turns"): "new_turn",
    ("post", "/sessions/{session_id}/resume"): "resume_session",
    ("post", "/sessions/{session_id}/retry"): "retry_session",
    ("post", "/sessions/{session_id}/stop"): "stop_session",
    ("post", "/sessions/{session_id}/calls/{dispatch_id}/approval"): "approve_call",
    ("post", "/sessions/{session_id}/calls/{dispatch_id}/result"): "submit_call_result",
    ("get", "/runs/{run_id}"): "get_run",
    ("get", "/sessions/{session_id}/events"): "stream_session_events",
    ("get", "/sessions/{session_id}/live"): "stream_session_live",
}
SSE_ROUTES = {"/sessions/{session_id}/events", "/sessions/{session_id}/live"}
PUBLIC_ROUTES = {"/healthz"}


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The schema as the service publishes it (building the app opens no database)."""
    from helix_dbos.service.app import create_app

    unused = tmp_path_factory.mktemp("spec") / "never-opened.sqlite"
    return create_app(app_spec="helix_dbos.examples:runtime", database_url=f"sqlite:///{unused}").openapi()


def test_every_operation_has_its_short_stable_id(spec: dict[str, Any]) -> None:
    found = {(method, path): op["operationId"] for path, ops in spec["paths"].items() for method, op in ops.items()}
    assert found == OPERATION_IDS
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+){0,3}", op_id) for op_id in found.values())


def test_sse_routes_declare_only_the_event_stream_and_errors_as_json(spec: dict[str, Any]) -> None:
    for path in SSE_ROUTES:
        responses = spec["paths"][path]["get"]["responses"]
        assert list(responses["200"]["content"]) == ["text/event-stream"], path
        for status, response in responses.items():
            if status != "200":
                assert list(response["content"]) == ["application/json"], (path, status)


def test_only_what_is_served_without_auth_declares_no_security(spec: dict[str, Any]) -> None:
    assert spec["security"] == [{"apiKey": []}, {"bearer": []}]
    for path, ops in spec["paths"].items():
        for op in ops.values():
            assert ("security" in op and op["security"] == []) == (path in PUBLIC_ROUTES), path
    # /openapi.json and /docs are served without auth too: they are not operations of the schema
    assert "/openapi.json" not in spec["paths"] and "/docs" not in spec["paths"]


def test_bodies_are_required_and_carry_no_default(spec: dict[str, Any]) -> None:
    """The service refuses a POST without a JSON body (415), so every body is published as required,
    and none has a ``default`` (beside a ``oneOf`` it made openapi-python-client drop the endpoint)."""
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert ("requestBody" in op) == (method == "post"), (method, path)
            if method == "post":
                assert op["requestBody"]["required"] is True, path
                for media in op["requestBody"]["content"].values():
                    assert "default" not in media["schema"], path
    for path, members in (("resume", 3), ("retry", 2)):
        body = spec["paths"][f"/sessions/{{session_id}}/{path}"]["post"]["requestBody"]
        assert len(body["content"]["application/json"]["schema"]["oneOf"]) == members


# --- the generated client, against a live service ------------------------------------------------


def generate(base: str, where: Path) -> ModuleType:
    """openapi-python-client on the live /openapi.json; any warning (a dropped endpoint) fails."""
    import httpx

    spec = httpx.get(f"{base}/openapi.json", timeout=30).json()
    path = where / "openapi.json"
    path.write_text(json.dumps(spec))
    package = f"helix_api_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # its ruff pass
    proc = subprocess.run(
        [str(BIN / "openapi-python-client"), "generate", "--path", str(path), "--meta", "none", "--output-path", str(where / package)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "warning" not in output.lower() and "error" not in output.lower(), output
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module(package)
    finally:
        sys.path.remove(str(where))


def sse_frames(text: str) -> list[dict[str, str]]:
    """The frames of an SSE body: each a dict of its fields (comments and the retry hint left out)."""
    frames, frame = [], {}
    for line in text.splitlines():
        if line.startswith(":"):
            continue
        if not line:
            if frame and set(frame) != {"retry"}:
                frames.append(frame)
            frame = {}
            continue
        name, _, value = line.partition(":")
        frame[name] = value.removeprefix(" ")
    if frame and set(frame) != {"retry"}:
        frames.append(frame)
    return frames


def poll(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def api(services: Callable[..., Service], tmp_path: Path) -> Iterator[tuple[ModuleType, Service]]:
    service = services(extra_env=KEYS_ENV)
    yield generate(service.base, tmp_path), service


@one_database  # the OpenAPI schema a client is generated from; the service's sessions run on both in test_service
def test_a_generated_client_drives_whole_sessions(api: tuple[ModuleType, Service]) -> None:
    gen, service = api
    m = importlib.import_module(f"{gen.__name__}.models")
    ops = {name: importlib.import_module(f"{gen.__name__}.api.{group}.{name}") for group, name in (
        ("service", "health"), ("service", "list_agents"), ("sessions", "start_session"), ("sessions", "get_session"),
        ("sessions", "get_run"), ("sessions", "list_sessions"), ("sessions", "stream_session_events"), ("answers", "approve_call"),
        ("answers", "submit_call_result"), ("entries", "resume_session"), ("entries", "retry_session"), ("entries", "stop_session"),
    )}
    anonymous = gen.Client(base_url=service.base, timeout=60)
    alice = gen.AuthenticatedClient(base_url=service.base, token=KEY, timeout=60)

    # served without auth, as the schema says; the rest refuses an anonymous caller with a typed body
    health = ops["health"].sync(client=anonymous)
    assert isinstance(health, m.Health) and health.status == "ok"
    refused = ops["list_agents"].sync_detailed(client=anonymous)
    assert refused.status_code == 401 and isinstance(refused.parsed, m.ErrorBody) and refused.parsed.code == "unauthenticated"
    assert {a.name for a in ops["list_agents"].sync(client=alice)} == {"concierge", "errands"}

    # start without waiting, then poll the run until it waits for the approval
    started = ops["start_session"].sync(client=alice, body=m.StartSession(agent="concierge", message="Dinner for two in Porto"))
    assert isinstance(started, m.RunOut), started
    sid = started.session_id
    waiting = poll(lambda: (r := ops["get_run"].sync(started.run_id, client=alice)) and r.status == "suspended_client_tool" and r, "the approval")
    [approval] = waiting.pending
    assert approval.kind == "approval" and approval.tool_name == "book_table"

    # approve: the run books and then waits for the client's calendar tool
    answer = ops["approve_call"].sync(sid, approval.dispatch_id, client=alice, body=m.Approval(approved=True, reason="looks fine"), wait=30)
    assert isinstance(answer, m.AnswerOut) and answer.remaining == [], answer
    [client_call] = answer.run.pending
    assert client_call.kind == "client" and client_call.tool_name == "add_to_calendar"

    # the client's answer: a result (the result/error union of the body)
    done = ops["submit_call_result"].sync(sid, client_call.dispatch_id, client=alice, body=m.ClientOk(result={"calendar_id": "evt-1"}), wait=30)
    assert isinstance(done, m.AnswerOut) and done.run.status == "completed" and done.run.output == "Your table is booked and in your calendar."
    view = ops["get_session"].sync(sid, client=alice)
    assert isinstance(view, m.SessionOut) and {c.tool_name: c.status for c in view.calls} == {"search_restaurants": "ok", "book_table": "ok", "add_to_calendar": "ok"}
    assert sid in {s.session_id for s in ops["list_sessions"].sync(client=alice)}

    # the events, through the generated call: the stream handed over as text, not parsed as JSON
    events = ops["stream_session_events"].sync_detailed(sid, client=alice)
    assert events.status_code == 200 and events.headers["content-type"].startswith("text/event-stream")
    assert isinstance(events.parsed, str)
    frames = sse_frames(events.parsed)
    seqs = [int(f["id"]) for f in frames if "id" in f]
    assert seqs == list(range(1, len(seqs) + 1)) and frames[-1]["event"] == "end"
    assert json.loads(frames[-1]["data"]) == {"status": "completed", "last_event_id": seqs[-1]}
    assert {"approval_requested", "approval_decided", "client_call"} <= {f["event"] for f in frames}
    # ... and as a stream, through the generated request and the client's own connection
    half = seqs[len(seqs) // 2]
    with alice.get_httpx_client().stream(**ops["stream_session_events"]._get_kwargs(sid, last_event_id=str(half))) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        tail = sse_frames("\n".join(stream.iter_lines()) + "\n")
    assert [int(f["id"]) for f in tail if "id" in f] == seqs[seqs.index(half) + 1:]
    missing = ops["stream_session_events"].sync_detailed("no-such-session", client=alice)
    assert missing.status_code == 404 and isinstance(missing.parsed, m.ErrorBody) and missing.parsed.code == "session_not_found"

    # resume ``continue`` (nothing to resume on a finished session: a typed 409) ...
    nothing = ops["resume_session"].sync_detailed(sid, client=alice, body=m.ResumeContinue())
    assert nothing.status_code == 409 and isinstance(nothing.parsed, m.ErrorBody) and nothing.parsed.code == "nothing_to_resume"
    # ... and with a message it redirects a session waiting for an approval
    second = ops["start_session"].sync(client=alice, body=m.StartSession(agent="concierge", message="Dinner in Lisbon"), wait=30)
    assert second.status == "suspended_client_tool"
    redirected = ops["resume_session"].sync(second.session_id, client=alice, body=m.ResumeWithMessage(mode="with_message", message="Dinner in Rome"), wait=30)
    assert isinstance(redirected, m.RunOut) and redirected.status == "suspended_client_tool", redirected
    [rome] = redirected.pending
    assert rome.tool_name == "book_table" and rome.dispatch_id != second.pending[0].dispatch_id

    # stop: a suspended run stops at once
    stopped = ops["stop_session"].sync(second.session_id, client=alice, body=m.Stop(kind=m.StopKind.INTERRUPT))
    assert isinstance(stopped, m.StopOut) and stopped.stopped and stopped.status == "interrupted", stopped
    # retry (recover) the interrupted run: the model reads that the booking was stopped
    retried = ops["retry_session"].sync(second.session_id, client=alice, body=m.RetryRecover(), wait=30)
    assert isinstance(retried, m.RunOut) and retried.status == "completed", retried
    assert "run_stopped" in str(retried.output)
    # and a retry body of the union's other member is sent as such (a checkpoint needs its message)
    bad = ops["retry_session"].sync_detailed(second.session_id, client=alice, body=m.RetryFromCheckpoint(checkpoint_id="cp-nope", message="again"))
    assert bad.status_code in (404, 409) and isinstance(bad.parsed, m.ErrorBody), bad
    entries = [r.entry for r in ops["get_session"].sync(second.session_id, client=alice).runs]
    assert entries == ["start", "resume_with_message", "retry"], entries
