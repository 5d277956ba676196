"""Every status the service answers is in /openapi.json, on the operation that answers it.

The schema listed 400/401/403/404/409 while the service also answers 415 ``unsupported_media_type``
(a POST not declared JSON) and 503 ``store_unavailable`` (the database unreachable past
``store_retry_window``), which docs/service.md's table has. Two checks:

- From the error registry (``service.errors.API_ERROR_CODES``, each code's status read off its
  ``HelixError`` class): every status an operation can answer appears in the schema and in its
  description.
- Against the live service (a front end over Postgres behind a real TCP proxy, with API keys): every
  operation of the schema is sent a request with no credentials, with an unknown query parameter,
  with a body not declared JSON, and, with the database cut, a valid one; each status it answers
  must be one its operation lists, and the refusals the schema adds to every operation
  (``app.refusals``) must be the ones it answered.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic_ai.models.test import TestModel

import helix_dbos as hx
from helix_dbos import apikeys, errors
from helix_dbos.service import errors as service_errors
from helix_dbos.service.app import STORELESS, UNAUTHENTICATED, create_app, refusals
from helix_dbos.service.settings import ServiceSettings
from tests.support.tcpproxy import TcpProxy

#: A valid body for each POST operation (a new operation must add its own here).
BODIES: dict[str, dict[str, Any]] = {
    "start_session": {"agent": "acks", "message": "book a table"},
    "new_turn": {"message": "a table for four instead"},
    "resume_session": {"mode": "continue"},
    "retry_session": {},
    "stop_session": {"kind": "interrupt"},
    "approve_call": {"approved": True},
    "submit_call_result": {"result": 1},
}
#: Answered by routing, for an address or a method no operation has: not an operation's response.
ROUTING = {"not_found", "method_not_allowed"}


def status_of(code: str) -> int:
    """The status the service answers ``code`` with: its ``HelixError`` class's, or the handler's."""
    if code == "internal_error":
        return 500
    classes: list[type[errors.HelixError]] = [errors.HelixError]
    while classes:
        cls = classes.pop()
        if cls.__dict__.get("code") == code:
            return cls.status
        classes.extend(cls.__subclasses__())
    statuses = {c: status for status, (c, _) in service_errors.HTTP_CODES.items()}
    return statuses[code]


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            yield path, method, op


def test_every_status_of_the_error_registry_is_published(tmp_path: Any) -> None:
    spec = create_app(app_spec="helix_dbos.examples:runtime", database_url=f"sqlite:///{tmp_path / 'never-opened.sqlite'}").openapi()
    published = {status for _, _, op in operations(spec) for status in op["responses"]}
    answered = {str(status_of(code)) for code in service_errors.API_ERROR_CODES if code not in ROUTING}
    assert {"400", "401", "403", "404", "409", "415", "500", "503"} <= answered  # the registry is read, not empty
    assert answered <= published, sorted(answered - published)
    for status in answered:
        assert status in spec["info"]["description"], status
    for path, method, op in operations(spec):
        assert set(refusals(path, method)) <= set(op["responses"]), (method, path)
        for status, response in op["responses"].items():
            if status != "200" and status != "202":
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)


KEY = apikeys.new_key()


@pytest.fixture
def front_end(pg_url: str) -> Iterator[tuple[TestClient, TcpProxy, dict[str, Any]]]:
    """The service as a front end (it runs nothing) over Postgres through a proxy, with one API key."""
    proxy = TcpProxy.for_url(pg_url)
    agent = hx.Agent("acks", TestModel())
    rt = hx.Runtime([agent], mode="client", database_url=proxy.url(pg_url), store_retry_window=1.0)
    settings = ServiceSettings(host="127.0.0.1", keys=apikeys.parse(apikeys.entry_line(KEY, "alice", {"operator"})), allowed_hosts=["testserver"])
    try:
        with TestClient(create_app(rt, settings=settings), raise_server_exceptions=False) as http:
            yield http, proxy, http.app.openapi()  # type: ignore[attr-defined]
    finally:
        proxy.restore()
        proxy.close()


def _url(path: str) -> str:
    ids = {"{session_id}": f"s-{uuid.uuid4().hex[:8]}", "{dispatch_id}": uuid.uuid4().hex, "{run_id}": uuid.uuid4().hex}
    for name, value in ids.items():
        path = path.replace(name, value)
    return path


def test_every_status_an_operation_answers_is_one_it_lists(front_end: tuple[TestClient, TcpProxy, dict[str, Any]]) -> None:
    http, proxy, spec = front_end
    auth = {"Authorization": f"Bearer {KEY}"}
    answered: dict[tuple[str, str], set[str]] = {}

    def send(path: str, method: str, op: dict[str, Any], *, headers: dict[str, str], json_body: bool = True, query: dict[str, str] | None = None) -> str:
        kw: dict[str, Any] = {"headers": headers, "params": query or {}}
        if method == "post":
            kw["json" if json_body else "content"] = BODIES[op["operationId"]] if json_body else b"approved=true"
            if not json_body:
                kw["headers"] = {**headers, "Content-Type": "application/x-www-form-urlencoded"}
        got = http.request(method.upper(), _url(path), **kw)
        assert got.status_code == 200 or got.headers["content-type"].startswith("application/json"), (method, path, got.status_code)
        answered.setdefault((method, path), set()).add(str(got.status_code))
        return str(got.status_code)

    for path, method, op in operations(spec):
        authenticated = path not in UNAUTHENTICATED
        assert send(path, method, op, headers={}) == ("401" if authenticated else "200"), (method, path)
        assert send(path, method, op, headers=auth, query={"bogus": "1"}) == "400", (method, path)
        if method == "post":
            assert send(path, method, op, headers=auth, json_body=False) == "415", (method, path)
    proxy.cut()
    try:
        for path, method, op in operations(spec):
            got = send(path, method, op, headers=auth, query={"timeout": "5"} if path.endswith("/live") else None)
            assert got == ("200" if path in STORELESS else "503"), (method, path, got)
    finally:
        proxy.restore()
    for (method, path), statuses in answered.items():
        listed = set(spec["paths"][path][method]["responses"])
        assert statuses <= listed, (method, path, sorted(statuses - listed))
