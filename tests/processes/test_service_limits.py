"""The service's size limits, against a real uvicorn on both databases: a body, a message or a
client tool's result over its limit is a 413 ``payload_too_large`` and stores nothing, and a body
over the limit is refused before it is read (a declared length at once, a chunked body as it
passes the limit). The ledger is read by the test, never through the service.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from helix_dbos.ledger.engine import create_sync_engine, is_sqlite
from tests.conftest import one_database
from tests.processes.test_service import Service, expect_error, services, snapshot  # noqa: F401 (services is a fixture)

MIB = 1 << 20
MESSAGE_CHARS = 2000
RESULT_BYTES = 3000


def database_bytes(db_url: str) -> int:
    """The database's size on disk, as the operator would measure it."""
    if is_sqlite(db_url):
        path = Path(sa.engine.make_url(db_url).database or "")
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))  # the file, its WAL and shm
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("select pg_database_size(current_database())")).scalar_one())
    finally:
        engine.dispose()


def raw_request(base: str, head: str, body_parts: list[bytes]) -> tuple[int, dict[str, Any]]:
    """Send a request's head and the given body parts on a plain socket (never finishing a body that
    promised more), then read the answer: what a server that waited for the whole body never gives."""
    url = urlsplit(base)
    with socket.create_connection((url.hostname, url.port), timeout=60) as sock:
        sock.sendall(head.encode())
        for part in body_parts:
            sock.sendall(part)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(_header(data, "content-length") or 0):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1])


def _header(data: bytes, name: str) -> str | None:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.encode():
            return value.strip().decode()
    return None


def _too_large(status: int, body: dict[str, Any]) -> dict[str, Any]:
    assert status == 413, (status, body)
    assert set(body) == {"error", "code", "detail"} and body["code"] == "payload_too_large", body
    return body


@one_database  # bodies are refused unread, before the database
def test_bodies_over_the_limit_are_refused_unread_and_store_nothing(db_url: str, services: Callable[..., Service]) -> None:
    service = services()  # the defaults: a 1 MiB body
    with service.client() as http:
        waiting = http.post("/sessions", params={"wait": 30}, json={"agent": "concierge", "message": "dinner in Lisbon"}).json()
        sid = waiting["session_id"]
        before, size_before = snapshot(db_url), database_bytes(db_url)
        host = urlsplit(service.base).netloc

        # a 50 MB message, declared: refused on its head, with 10 bytes of the 50 MB sent
        head = f"POST /sessions/{sid}/turns HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {50 * 10**6}\r\n\r\n"
        body = _too_large(*raw_request(service.base, head, [b'{"message":']))
        assert body["detail"] == {"limit_bytes": MIB, "content_length": 50 * 10**6, "setting": "HELIX_DBOS_MAX_REQUEST_BYTES"}

        # chunked, no length: refused once it passes 1 MiB, though the body never ends
        head = f"POST /sessions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunk = b"x" * 65536
        parts = [b"%x\r\n%s\r\n" % (len(c), c) for c in [b'{"agent":"conci', *[chunk] * 17]]  # 1 MiB + 64 KiB, unterminated
        _too_large(*raw_request(service.base, head, parts))

        # through an ordinary client: one byte over is refused, the limit itself is read
        over = json.dumps({"message": "a" * (MIB - 14)}).encode()
        assert len(over) == MIB + 1
        _too_large(*(lambda r: (r.status_code, r.json()))(http.post(f"/sessions/{sid}/turns", content=over, headers={"content-type": "application/json"})))
        assert snapshot(db_url) == before, "a refused body changed the ledger"
        assert database_bytes(db_url) - size_before < MIB, "the database grew by a refused body"

        at_limit = json.dumps({"message": "a" * (MIB - 15)}).encode()
        assert len(at_limit) == MIB
        # read whole, then refused by the message's own limit (262144 characters): still nothing stored
        refused = expect_error(http.post(f"/sessions/{sid}/turns", content=at_limit, headers={"content-type": "application/json"}), 413, "payload_too_large")
        assert refused["detail"]["field"] == "message" and refused["detail"]["limit_chars"] == 262144
        assert snapshot(db_url) == before
        # and the service still answers on the same client
        assert http.get(f"/sessions/{sid}").status_code == 200


@one_database  # limits checked on the request, before the database
def test_messages_and_results_over_their_limits_are_413_and_published(db_url: str, services: Callable[..., Service]) -> None:
    service = services(extra_env={"HELIX_DBOS_MAX_MESSAGE_CHARS": str(MESSAGE_CHARS), "HELIX_DBOS_MAX_RESULT_BYTES": str(RESULT_BYTES)})
    with service.client() as http:
        spec = http.get("/openapi.json").json()
        for path, ops in spec["paths"].items():
            if "post" in ops:
                assert ops["post"]["responses"]["413"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody"), path
        schemas = spec["components"]["schemas"]
        assert schemas["StartSession"]["properties"]["message"]["maxLength"] == MESSAGE_CHARS
        assert schemas["ClientFailed"]["properties"]["error"]["maxLength"] == MESSAGE_CHARS
        assert f"{RESULT_BYTES} bytes" in schemas["ClientOk"]["properties"]["result"]["description"]

        done = http.post("/sessions", params={"wait": 30}, json={"agent": "concierge", "message": "dinner in Rome"}).json()
        sid = done["session_id"]
        approved = http.post(f"/sessions/{sid}/calls/{done['pending'][0]['dispatch_id']}/approval", params={"wait": 30}, json={"approved": True}).json()
        client_call = approved["run"]["pending"][0]["dispatch_id"]
        before = snapshot(db_url)
        long = "é" * (MESSAGE_CHARS + 1)  # characters, not bytes
        big_result = {"rows": ["x" * 100] * 30}  # 3000+ bytes of JSON
        for path, body, field in [
            ("/sessions", {"agent": "concierge", "message": long}, "message"),
            (f"/sessions/{sid}/turns", {"message": long}, "message"),
            (f"/sessions/{sid}/resume", {"mode": "with_message", "message": long}, "message"),
            (f"/sessions/{sid}/retry", {"message": long}, "message"),
            (f"/sessions/{sid}/calls/{client_call}/result", {"error": long}, "error"),
            (f"/sessions/{sid}/calls/{client_call}/result", {"result": big_result}, "result"),
        ]:
            refused = expect_error(http.post(path, json=body), 413, "payload_too_large")
            assert refused["detail"]["field"] == field, refused
        assert snapshot(db_url) == before, "a refused message or result changed the ledger"

        # at the limits, the same requests go through
        answered = http.post(f"/sessions/{sid}/calls/{client_call}/result", params={"wait": 30}, json={"result": {"rows": ["x" * 100] * 20}})
        assert answered.status_code == 200 and answered.json()["run"]["status"] == "completed", answered.text
        turn = http.post(f"/sessions/{sid}/turns", params={"wait": 30}, json={"message": "é" * MESSAGE_CHARS})
        assert turn.status_code == 202, turn.text
        # a list is capped: GET /sessions takes at most 1000
        expect_error(http.get("/sessions", params={"limit": 1001}), 400, "validation_error")
