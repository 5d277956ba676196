"""The rough edges a new user hit in the HTTP service, each pinned against a real uvicorn.

The schema test is the contract's oracle: for a corpus of bodies, the published OpenAPI schema
accepts a body exactly when the service does not answer it with a 400 ``validation_error``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import jsonschema

from tests.conftest import one_database
from tests.processes.test_service import Service, expect_error, read_sse, services, snapshot  # noqa: F401 (services is a fixture)

BODIES: dict[str, list[Any]] = {
    "resume": [
        {}, {"mode": "continue"}, {"mode": "continue", "checkpoint_id": ""}, {"mode": "continue", "checkpoint_id": "cp"}, {"mode": "continue", "message": "hi"},
        {"mode": "with_message"}, {"mode": "with_message", "message": ""}, {"mode": "with_message", "message": "hi"}, {"mode": "with_message", "message": "hi", "checkpoint_id": "cp"},
        {"mode": "from_checkpoint"}, {"mode": "from_checkpoint", "checkpoint_id": ""}, {"mode": "from_checkpoint", "checkpoint_id": "cp"}, {"mode": "from_checkpoint", "checkpoint_id": "cp", "message": "m"},
        {"mode": "sideways"}, {"mode": None}, [], "continue",
    ],
    "retry": [{}, {"message": "hi"}, {"message": ""}, {"message": None}, {"checkpoint_id": "cp"}, {"checkpoint_id": "cp", "message": "m"}, {"checkpoint_id": "", "message": "m"}, {"checkpoint_id": "cp", "message": ""}],
    "turns": [{}, {"message": ""}, {"message": "m"}, {"message": "m", "extra": 1}],
    "result": [{}, {"result": 1}, {"result": None}, {"result": {"a": [1]}}, {"error": "boom"}, {"error": ""}, {"error": None}, {"result": 1, "error": "x"}],
    "approval": [{}, {"approved": True}, {"approved": "maybe"}, {"approved": True, "actor": "ceo@corp"}, {"approved": False, "reason": "r"}],
}


def _schema_for(spec: dict[str, Any], path: str) -> dict[str, Any]:
    body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return {**body, "components": spec["components"]}


def test_openapi_options_and_the_schema_accept_what_the_service_accepts(db_url: str, services: Callable[..., Service]) -> None:
    service = services(extra_env={"HELIX_DBOS_DEMO_SLOW": "6"})
    http = service.client()
    spec = http.get("/openapi.json").json()
    assert '"422"' not in json.dumps(spec)  # the service answers bad input with 400, and says so
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if op.get("parameters") or op.get("requestBody"):
                assert "400" in op["responses"], (method, path)
                assert op["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")

    # OPTIONS and 405 name every method of the address
    options = http.options("/sessions")
    assert options.status_code == 204 and options.headers["allow"] == "GET, OPTIONS, POST"
    assert http.options("/sessions/any/stop").headers["allow"] == "OPTIONS, POST"
    assert expect_error(http.delete("/sessions"), 405, "method_not_allowed") and http.delete("/sessions").headers["allow"] == "GET, OPTIONS, POST"
    expect_error(http.options("/no/such/thing"), 404, "not_found")

    busy = http.post("/sessions", json={"agent": "errands", "message": "go"}).json()
    sid = busy["session_id"]
    paths = {
        "resume": f"/sessions/{sid}/resume",
        "retry": f"/sessions/{sid}/retry",
        "turns": f"/sessions/{sid}/turns",
        "result": f"/sessions/{sid}/calls/nope/result",
        "approval": f"/sessions/{sid}/calls/nope/approval",
    }
    templates = {
        "resume": "/sessions/{session_id}/resume",
        "retry": "/sessions/{session_id}/retry",
        "turns": "/sessions/{session_id}/turns",
        "result": "/sessions/{session_id}/calls/{dispatch_id}/result",
        "approval": "/sessions/{session_id}/calls/{dispatch_id}/approval",
    }
    state = snapshot(db_url)
    disagreements = []
    for kind, bodies in BODIES.items():
        validator = jsonschema.Draft202012Validator(_schema_for(spec, templates[kind]))
        for body in bodies:
            by_schema = validator.is_valid(body)
            answer = http.post(paths[kind], json=body)
            by_service = not (answer.status_code == 400 and answer.json()["code"] == "validation_error")
            if by_schema != by_service:
                disagreements.append((kind, body, by_schema, answer.status_code, answer.text[:200]))
            if by_service:  # a running session: valid entries meet the gate, valid answers an unknown call
                assert answer.status_code in (404, 409), (kind, body, answer.text)
    assert disagreements == []
    after = snapshot(db_url)["counts"]  # the busy run itself moves on; no entry, answer or stop was taken
    assert (after["runs"], after["stops"]) == (state["counts"]["runs"], 0)
    assert not [c for c in snapshot(db_url)["calls"] if c[3] is not None], "an answer was recorded"
    # the two bodies a new user tripped on, by name
    for body in ({}, {"result": 1, "error": "x"}):
        refused = expect_error(http.post(f"/sessions/{sid}/calls/nope/result", json=body), 400, "validation_error")
        assert "exactly one of result or error" in refused["error"]
    refused = expect_error(http.post(f"/sessions/{sid}/resume", json={"mode": "continue", "checkpoint_id": ""}), 400, "validation_error")
    assert refused["error"] == "The request is not valid: checkpoint_id: Extra inputs are not permitted."

    # stop?wait= is honoured (and a misspelt parameter refused rather than ignored)
    expect_error(http.post(f"/sessions/{sid}/stop", params={"wiat": 10}, json={}), 400, "validation_error")
    assert snapshot(db_url)["counts"]["stops"] == 0
    stopped = http.post(f"/sessions/{sid}/stop", params={"wait": 30}, json={"kind": "interrupt"})
    assert stopped.status_code == 202, stopped.text
    assert stopped.json()["status"] == "interrupted" and stopped.json()["stopped"] is True
    http.close()


def test_event_cursors_beyond_32_bits_are_refused(services: Callable[..., Service]) -> None:
    service = services()
    with service.client() as http:
        sid = http.post("/sessions", params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Porto"}).json()["session_id"]
        for value in (2**31, 2**63, 10**30):
            expect_error(http.get(f"/sessions/{sid}/events", params={"after": value}), 400, "validation_error")
            expect_error(http.get(f"/sessions/{sid}/events", headers={"Last-Event-ID": str(value)}), 400, "validation_error")
    last = read_sse(service.base, sid, 2**31 - 1)
    assert last.events == [] and last.end is not None and last.end["status"] == "suspended_client_tool"


@one_database  # a static page of the service
def test_swagger_ui_is_served_from_the_service_itself(services: Callable[..., Service]) -> None:
    service = services()
    with service.client() as http:
        page = http.get("/docs")
        assert page.status_code == 200
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text) + re.findall(r"""url: *['"]([^'"]+)['"]""", page.text)
        assert urls and all(u.startswith("/") for u in urls), urls  # nothing from another host: works offline
        for url in urls:
            assert http.get(url).status_code == 200, url
        assert http.get("/redoc").status_code == 404  # ReDoc would need a CDN: not served
