"""What the service's bodies hold agrees with what /openapi.json says, against a real uvicorn on
both databases: every timestamp carries its UTC offset (an RFC 3339 ``date-time``), a priority is
an integer however JSON writes it, and a client tool's result is any JSON value, stored exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from datetime import datetime as dt
from typing import Any

import jsonschema
import sqlalchemy as sa

from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from tests.processes.test_service import Service, expect_error, read_sse, services, snapshot  # noqa: F401 (services is a fixture)

#: RFC 3339's date-time (section 5.6): a "T" (or space-free) separator and a mandatory offset.
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$")


def timestamps(value: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every ``*_at`` value in a JSON document, with where it is."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("_at") and item is not None:
                yield f"{where}.{key}", item
            yield from timestamps(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from timestamps(item, f"{where}[{i}]")


def date_time_fields(spec: dict[str, Any]) -> set[str]:
    """The property names the published schemas declare ``format: date-time``."""
    out: set[str] = set()
    for schema in spec["components"]["schemas"].values():
        for name, prop in schema.get("properties", {}).items():
            if any(m.get("format") == "date-time" for m in [prop, *prop.get("anyOf", [])]):
                out.add(name)
    return out


def test_every_timestamp_the_api_returns_carries_its_utc_offset(services: Callable[..., Service]) -> None:
    service = services()
    with service.client() as http:
        waiting = http.post("/sessions", params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Porto"}).json()
        sid = waiting["session_id"]
        approved = http.post(f"/sessions/{sid}/calls/{waiting['pending'][0]['dispatch_id']}/approval", params={"wait": 30}, json={"approved": True}).json()
        done = http.post(f"/sessions/{sid}/calls/{approved['run']['pending'][0]['dispatch_id']}/result", params={"wait": 30}, json={"result": {"calendar_id": "e1"}}).json()
        assert done["run"]["status"] == "completed"
        spec = http.get("/openapi.json").json()
        bodies = {
            "session": http.get(f"/sessions/{sid}").json(),
            "sessions": http.get("/sessions").json(),
            "run": http.get(f"/runs/{done['run']['run_id']}").json(),
            "executors": http.get("/executors").json(),
            "events": read_sse(service.base, sid).events,
        }
    found = [(f"{name}{where}", value) for name, body in bodies.items() for where, value in timestamps(body)]
    keys = {where.rsplit(".", 1)[1] for where, _ in found}
    assert {"created_at", "updated_at", "started_at", "ended_at", "renewed_at"} <= keys, keys
    assert keys - {"created_at"} <= date_time_fields(spec), "a timestamp the schema does not call a date-time"
    for where, value in found:
        assert isinstance(value, str) and RFC3339.match(value), (where, value)
        assert dt.fromisoformat(value).utcoffset() == timedelta(0), (where, value)  # UTC, on both databases


PRIORITIES: list[tuple[Any, bool]] = [
    (5, True), (5.0, True), (1e3, True), (2147483647.0, True), (None, True),
    (5.5, False), ("5", False), (True, False), (0, False), (0.0, False), (2147483648, False), (-1.0, False),
]


def test_priority_the_schema_takes_is_the_priority_the_service_takes(db_url: str, services: Callable[..., Service]) -> None:
    service = services(extra_env={"HELIX_DBOS_DEMO_SLOW": "6"})
    with service.client() as http:
        spec = http.get("/openapi.json").json()
        turn = jsonschema.Draft202012Validator({**spec["components"]["schemas"]["NewTurn"], "components": spec["components"]})
        busy = http.post("/sessions", json={"agent": "errands", "message": "go"}).json()["session_id"]
        before = snapshot(db_url)["counts"]["runs"]
        for priority, valid in PRIORITIES:
            body = {"message": "m", "priority": priority}
            assert turn.is_valid(body) is valid, body
            answer = http.post(f"/sessions/{busy}/turns", json=body)
            if valid:  # a valid entry meets the busy session's gate
                expect_error(answer, 409, "session_running")
            else:
                expect_error(answer, 400, "validation_error")
        assert snapshot(db_url)["counts"]["runs"] == before
        # and a priority written 7.0 opens a run as 7 does
        started = http.post("/sessions", params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Porto", "priority": 7.0})
        assert started.status_code == 202 and started.json()["status"] == "suspended_client_tool", started.text


ODD_RESULT = {"text": "nul:\x00 high:\ud800 low:\udfff", "key\x00\ud800": [1, "\udbff"]}


def test_a_client_result_holding_nul_or_a_lone_surrogate_is_stored_exactly(db_url: str, services: Callable[..., Service]) -> None:
    service = services()
    with service.client() as http:
        spec = http.get("/openapi.json").json()
        result_schema = jsonschema.Draft202012Validator({**spec["components"]["schemas"]["ClientOk"], "components": spec["components"]})
        assert result_schema.is_valid({"result": ODD_RESULT})  # any JSON value: the schema allows it
        waiting = http.post("/sessions", params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Porto"}).json()
        sid = waiting["session_id"]
        approved = http.post(f"/sessions/{sid}/calls/{waiting['pending'][0]['dispatch_id']}/approval", params={"wait": 30}, json={"approved": True}).json()
        client_call = approved["run"]["pending"][0]["dispatch_id"]
        raw = json.dumps({"result": ODD_RESULT}).encode()  # NUL and the surrogates as JSON escapes, as a client sends them
        answered = http.post(f"/sessions/{sid}/calls/{client_call}/result", params={"wait": 30}, content=raw, headers={"content-type": "application/json"})
        assert answered.status_code == 200 and answered.json()["run"]["status"] == "completed", answered.text
        [call] = [c for c in http.get(f"/sessions/{sid}").json()["calls"] if c["dispatch_id"] == client_call]
        assert call["result"] == ODD_RESULT  # read back through the API: the same value
        # text fields keep their rule, in the schema and in the service alike
        error_schema = jsonschema.Draft202012Validator({**spec["components"]["schemas"]["ClientFailed"], "components": spec["components"]})
        assert not error_schema.is_valid({"error": "a\ud800b"})
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:  # and in the ledger, read by the test: exactly what was sent
            stored = conn.execute(sa.select(t.calls.c.result).where(t.calls.c.dispatch_id == client_call)).scalar_one()
    finally:
        engine.dispose()
    assert stored == ODD_RESULT
