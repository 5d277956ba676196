"""Authentication, owners, roles, trusted hosts and CORS, against a real uvicorn on loopback.

Each test starts ``python -m helix_dbos.service`` on a fresh database (SQLite and Postgres) with
keys in ``HELIX_DBOS_API_KEYS`` (stored hashed, as an operator would) and checks what each
principal may see and do, that a refused request changes nothing, and that the approval's actor in
the ledger and in the audit views is the authenticated principal, whatever the body says.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from helix_dbos import apikeys
from helix_dbos.ledger.engine import create_sync_engine
from tests.conftest import one_database
from tests.processes.test_service import ROOT, Service, expect_error, read_sse, services, snapshot  # noqa: F401 (services is a fixture)
from tests.support.procs import SETTINGS_VARS, child_env, free_port

KEYS = {name: apikeys.new_key() for name in ("alice", "bob", "ops", "appr")}
ROLES = {"ops": {"operator"}, "appr": {"approver"}}
KEYS_ENV = {apikeys.ENV: ",\n".join(apikeys.entry_line(KEYS[n], n, ROLES.get(n, set())) for n in KEYS)}


def as_(name: str, header: str = "bearer") -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"} if header == "bearer" else {"X-API-Key": KEYS[name]}


def audit(db_url: str, sql: str) -> list[dict[str, Any]]:
    prefix = "" if db_url.startswith("sqlite") else "helix."
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(sql.format(p=prefix)))]
    finally:
        engine.dispose()


def test_keys_owners_roles_and_the_authenticated_approval_actor(db_url: str, services: Callable[..., Service]) -> None:
    service = services(extra_env=KEYS_ENV)
    http = service.client()
    assert KEYS["alice"] not in KEYS_ENV[apikeys.ENV]  # at rest only the digest

    # 401 without a key, with a wrong one, with a malformed header; /healthz stays public
    assert http.get("/healthz").status_code == 200
    for headers in ({}, {"Authorization": "Bearer hxk_wrong"}, {"X-API-Key": "nope"}, {"Authorization": "Basic YWxpY2U6eA=="}):
        expect_error(http.get("/sessions", headers=headers), 401, "unauthenticated")
        expect_error(http.post("/sessions", headers=headers, json={"agent": "concierge", "message": "hi"}), 401, "unauthenticated")
    expect_error(http.get("/agents"), 401, "unauthenticated")
    assert snapshot(db_url)["counts"]["sessions"] == 0

    run = http.post("/sessions", headers=as_("alice"), params={"wait": 30}, json={"agent": "concierge", "message": "Dinner for two in Porto"}).json()
    sid, approval = run["session_id"], run["pending"][0]["dispatch_id"]
    assert run["status"] == "suspended_client_tool"
    mine = http.post("/sessions", headers=as_("bob", "x-api-key"), params={"wait": 30}, json={"agent": "concierge", "message": "Lunch in Lisbon"}).json()
    assert http.get(f"/sessions/{sid}", headers=as_("alice")).json()["owner"] == "alice"

    # bob sees only his own; alice's session does not exist for him, through every door
    assert [s["session_id"] for s in http.get("/sessions", headers=as_("bob")).json()] == [mine["session_id"]]
    assert {s["owner"] for s in http.get("/sessions", headers=as_("bob")).json()} == {"bob"}
    state = snapshot(db_url)
    expect_error(http.get(f"/sessions/{sid}", headers=as_("bob")), 404, "session_not_found")
    expect_error(http.get(f"/sessions/{sid}/events", headers=as_("bob")), 404, "session_not_found")
    expect_error(http.get(f"/runs/{run['run_id']}", headers=as_("bob")), 404, "run_not_found")
    expect_error(http.post(f"/sessions/{sid}/turns", headers=as_("bob"), json={"message": "mine now"}), 404, "session_not_found")
    expect_error(http.post("/sessions", headers=as_("bob"), json={"agent": "concierge", "message": "mine now", "session_id": sid}), 404, "session_not_found")
    expect_error(http.post(f"/sessions/{sid}/resume", headers=as_("bob"), json={}), 404, "session_not_found")
    expect_error(http.post(f"/sessions/{sid}/retry", headers=as_("bob"), json={}), 404, "session_not_found")
    expect_error(http.post(f"/sessions/{sid}/stop", headers=as_("bob"), json={}), 404, "session_not_found")
    expect_error(http.post(f"/sessions/{sid}/calls/{approval}/approval", headers=as_("bob"), json={"approved": True}), 404, "session_not_found")
    expect_error(http.post(f"/sessions/{sid}/calls/{approval}/result", headers=as_("bob"), json={"result": 1}), 404, "session_not_found")
    # the approver and the operator see every session, but only their own role's actions
    assert {s["session_id"] for s in http.get("/sessions", headers=as_("appr")).json()} == {sid, mine["session_id"]}
    assert {s["session_id"] for s in http.get("/sessions", headers=as_("ops"), params={"agent": "concierge", "status": "suspended_client_tool"}).json()} == {sid, mine["session_id"]}
    assert http.get(f"/sessions/{sid}/events", headers=as_("ops")).status_code == 200
    expect_error(http.post(f"/sessions/{sid}/turns", headers=as_("appr"), json={"message": "x"}), 403, "forbidden")
    expect_error(http.post(f"/sessions/{sid}/calls/{approval}/approval", headers=as_("ops"), json={"approved": True}), 403, "forbidden")
    expect_error(http.post(f"/sessions/{sid}/turns", headers=as_("ops"), json={"message": "x"}), 403, "forbidden")
    # the actor is never a request field: a forged one is refused, not stored
    body = expect_error(http.post(f"/sessions/{sid}/calls/{approval}/approval", headers=as_("appr"), json={"approved": True, "actor": "ceo@corp"}), 400, "validation_error")
    assert "actor" in body["error"]
    assert snapshot(db_url) == state, "a refused request changed the ledger"

    decided = http.post(f"/sessions/{sid}/calls/{approval}/approval", headers=as_("appr"), params={"wait": 30}, json={"approved": True, "reason": "within budget"})
    assert decided.status_code == 200, decided.text
    client_call = decided.json()["run"]["pending"][0]["dispatch_id"]
    expect_error(http.post(f"/sessions/{sid}/calls/{client_call}/result", headers=as_("appr"), json={"result": 1}), 403, "forbidden")
    done = http.post(f"/sessions/{sid}/calls/{client_call}/result", headers=as_("alice"), params={"wait": 30}, json={"result": {"calendar_id": "evt-1"}}).json()
    assert done["run"]["status"] == "completed"

    view = http.get(f"/sessions/{sid}", headers=as_("alice")).json()
    booked = next(c for c in view["calls"] if c["tool_name"] == "book_table")
    assert booked["approval_actor"] == "appr"
    decided_event = next(e for e in read_sse(service.base, sid, headers=as_("alice")).events if e["type"] == "approval_decided")
    assert decided_event["data"]["actor"] == "appr" and decided_event["data"]["reason"] == "within budget"
    [row] = audit(db_url, "SELECT owner, approval_actor, approval_reason FROM {p}call_audit WHERE tool_name = 'book_table' AND session_id = '" + sid + "'")
    assert row == {"owner": "alice", "approval_actor": "appr", "approval_reason": "within budget"}
    assert {r["owner"] for r in audit(db_url, "SELECT owner FROM {p}run_audit WHERE session_id = '" + sid + "'")} == {"alice"}

    # the operator stops bob's session; the stop records the operator, not a body field
    stopped = http.post(f"/sessions/{mine['session_id']}/stop", headers=as_("ops"), json={"kind": "interrupt"})
    assert stopped.status_code == 202 and stopped.json()["status"] == "interrupted", stopped.text
    [stop_row] = audit(db_url, "SELECT requested_by FROM {p}stops WHERE session_id = '" + mine["session_id"] + "'")
    assert stop_row["requested_by"] == "ops"
    expect_error(http.post(f"/sessions/{sid}/stop", headers=as_("ops"), json={"requested_by": "someone"}), 400, "validation_error")

    # ?status= and ?agent= each leave out what does not match, and never widen what a principal sees
    bsid = mine["session_id"]
    errand = http.post("/sessions", headers=as_("alice"), params={"wait": 30}, json={"agent": "errands", "message": "the usual"}).json()
    assert errand["status"] == "completed", errand

    def listed(who: str, **query: str) -> set[str]:
        answer = http.get("/sessions", headers=as_(who), params=query)
        assert answer.status_code == 200, answer.text
        return {s["session_id"] for s in answer.json()}

    assert listed("ops") == {sid, bsid, errand["session_id"]}
    assert listed("ops", status="interrupted") == {bsid}
    assert listed("ops", status="completed") == {sid, errand["session_id"]}
    assert listed("ops", agent="errands") == {errand["session_id"]}
    assert listed("ops", agent="concierge") == {sid, bsid}
    assert listed("ops", agent="concierge", status="completed") == {sid}
    assert listed("alice", status="interrupted") == set() and listed("bob", agent="errands") == set()

    # the operator's recovery entries on another principal's stopped sessions: retry one, resume
    # another; a principal with neither the operator role nor the session gets 404, an approver 403
    again = http.post("/sessions", headers=as_("bob"), params={"wait": 30}, json={"agent": "concierge", "message": "Lunch in Faro"}).json()
    assert http.post(f"/sessions/{again['session_id']}/stop", headers=as_("ops"), params={"wait": 30}, json={}).json()["status"] == "interrupted"
    state = snapshot(db_url)
    for target in (bsid, again["session_id"]):
        for action in ("retry", "resume"):
            expect_error(http.post(f"/sessions/{target}/{action}", headers=as_("alice"), json={}), 404, "session_not_found")
            expect_error(http.post(f"/sessions/{target}/{action}", headers=as_("appr"), json={}), 403, "forbidden")
    assert snapshot(db_url) == state, "a refused request changed the ledger"
    for target, action in ((bsid, "retry"), (again["session_id"], "resume")):
        answer = http.post(f"/sessions/{target}/{action}", headers=as_("ops"), params={"wait": 30}, json={})
        assert answer.status_code == 202 and answer.json()["status"] == "completed", answer.text  # the model is told run_stopped and ends
        view = http.get(f"/sessions/{target}", headers=as_("bob")).json()
        assert view["owner"] == "bob" and [r["entry"] for r in view["runs"]] == ["start", "retry" if action == "retry" else "resume_continue"], view["runs"]
    http.close()


def test_authenticate_hook_fails_closed(db_url: str, services: Callable[..., Service]) -> None:
    """A gateway's hook names the principal; a missing header or a crashing hook is a 401."""
    service = services(extra_env={"HELIX_DBOS_AUTHENTICATE": "tests.support.authhook:authenticate"})
    with service.client() as http:
        expect_error(http.get("/sessions"), 401, "unauthenticated")
        expect_error(http.get("/sessions", headers={"X-Test-User": "crash"}), 401, "unauthenticated")
        carol = {"X-Test-User": "carol"}
        run = http.post("/sessions", headers=carol, params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Rome"}).json()
        sid = run["session_id"]
        assert http.get(f"/sessions/{sid}", headers=carol).json()["owner"] == "carol"
        expect_error(http.get(f"/sessions/{sid}", headers={"X-Test-User": "dave"}), 404, "session_not_found")
        boss = {"X-Test-User": "erin", "X-Test-Roles": "approver"}
        ok = http.post(f"/sessions/{sid}/calls/{run['pending'][0]['dispatch_id']}/approval", headers=boss, json={"approved": False, "reason": "too dear"})
        assert ok.status_code == 200, ok.text
    [row] = audit(db_url, "SELECT owner, approval_actor, approved FROM {p}call_audit WHERE tool_name = 'book_table'")
    assert row["owner"] == "carol" and row["approval_actor"] == "erin" and not row["approved"]


def _launch(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "helix_dbos.service", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _up(port: int, proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            time.sleep(0.1)
    return False


@one_database  # a refused start, before the database is opened
def test_refuses_to_serve_beyond_loopback_without_authentication(db_url: str, tmp_path: Path) -> None:
    env = child_env(SETTINGS_VARS)
    env.update(HELIX_DBOS_DATABASE_URL=db_url)
    port = free_port()
    refused = _launch(["--host", "0.0.0.0", "--port", str(port)], env, tmp_path / "refused.log")
    assert refused.wait(60) == 2
    said = (tmp_path / "refused.log").read_text()
    assert "configuration_error" in said and "HELIX_DBOS_API_KEYS" in said and "--insecure" in said and "Traceback" not in said
    for label, args, extra in (("insecure", ["--insecure"], {}), ("keys", [], KEYS_ENV)):
        port = free_port()
        proc = _launch(["--host", "0.0.0.0", "--port", str(port), *args], {**env, **extra, "HELIX_DBOS_EXECUTOR_ID": f"bind-{label}"}, tmp_path / f"{label}.log")
        try:
            assert _up(port, proc), (tmp_path / f"{label}.log").read_text()
            status = httpx.get(f"http://127.0.0.1:{port}/sessions", timeout=10).status_code
            assert status == (200 if label == "insecure" else 401)
        finally:
            proc.terminate()
            proc.wait(30)


@one_database  # HTTP middleware, before any read
def test_trusted_hosts_and_cors(db_url: str, services: Callable[..., Service]) -> None:
    closed = services()
    preflight = {"Origin": "https://ops.example.com", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    with closed.client() as http:
        expect_error(http.get("/sessions", headers={"Host": "attacker.example:8000"}), 400, "host_not_allowed")
        assert http.get("/sessions", headers={"Host": "localhost"}).status_code == 200
        answer = http.options("/sessions", headers=preflight)
        assert "access-control-allow-origin" not in answer.headers  # no CORS unless configured
        assert "access-control-allow-origin" not in http.get("/sessions", headers={"Origin": "https://ops.example.com"}).headers

    open_ = services(extra_env={"HELIX_DBOS_ALLOWED_HOSTS": "api.example.com,*.internal", "HELIX_DBOS_CORS_ORIGINS": "https://ops.example.com"})
    with open_.client() as http:
        assert http.get("/sessions", headers={"Host": "api.example.com"}).status_code == 200
        assert http.get("/sessions", headers={"Host": "node-3.internal:8000"}).status_code == 200
        expect_error(http.get("/sessions"), 400, "host_not_allowed")  # 127.0.0.1 is no longer listed
        assert http.get("/healthz").status_code == 200  # probes by address still work
        host = {"Host": "api.example.com"}
        answer = http.options("/sessions", headers={**preflight, **host})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == "https://ops.example.com"
        other = http.options("/sessions", headers={**preflight, **host, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_the_ui_cookie_is_httponly_strict_and_only_for_a_valid_key(services: Callable[..., Service]) -> None:
    service = services(extra_env=KEYS_ENV)
    with service.client() as http:
        page = http.get("/ui")
        assert page.status_code == 401 and 'id="key"' in page.text and "alice" not in page.text
        expect_error(http.post("/ui/login", json={"key": "hxk_not-a-key"}), 401, "unauthenticated")
        assert "helix_key" not in http.cookies
        signed = http.post("/ui/login", json={"key": KEYS["alice"]})
        assert signed.status_code == 200 and signed.json()["principal"] == "alice"
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert http.get("/sessions").status_code == 200  # the cookie authenticates the API too
        assert "alice" in http.get("/ui").text
        # a page on another site cannot post a form as JSON: a text/plain body is refused
        forged = http.post("/sessions", content=b'{"agent": "concierge", "message": "hi"}', headers={"content-type": "text/plain"})
        expect_error(forged, 415, "unsupported_media_type")
        # nor JSON with the cookie alone: that takes the CSRF token the pages carry (test_edge_inputs.py)
        expect_error(http.post("/sessions", json={"agent": "concierge", "message": "hi"}), 403, "csrf_failed")
        assert 'Secure' not in signed.headers["set-cookie"]  # on loopback; beyond it the cookie is Secure
        http.post("/ui/logout", json={})
        http.cookies.clear()
        expect_error(http.get("/sessions"), 401, "unauthenticated")


@one_database  # the role check, before the read
def test_executors_are_listed_for_operators_only(db_url: str, services: Callable[..., Service]) -> None:
    """GET /executors: the service's own executor with a live lease, for the operator role; another
    principal is refused 403, no key 401; a live-output stream of another owner's session is 404."""
    service = services(extra_env=KEYS_ENV)
    http = service.client()
    expect_error(http.get("/executors"), 401, "unauthenticated")
    expect_error(http.get("/executors", headers=as_("alice")), 403, "forbidden")
    rows = http.get("/executors", headers=as_("ops")).json()
    mine = [r for r in rows if r["executor_id"] == http.get("/healthz").json()["executor_id"]]
    assert len(mine) == 1 and mine[0]["status"] == "live" and mine[0]["pending_runs"] == 0, rows
    run = http.post("/sessions", headers=as_("alice"), params={"wait": 30}, json={"agent": "concierge", "message": "Dinner for two in Porto"}).json()
    expect_error(http.get(f"/sessions/{run['session_id']}/live", headers=as_("bob"), params={"timeout": 1}), 404, "session_not_found")
    expect_error(http.get(f"/sessions/{run['session_id']}/live", params={"timeout": 1}), 401, "unauthenticated")


@one_database  # authentication, before any read
def test_a_bearer_and_an_api_key_that_disagree_are_refused(db_url: str, services: Callable[..., Service]) -> None:
    service = services(extra_env=KEYS_ENV)
    with service.client() as http:
        alice, bob = KEYS["alice"], KEYS["bob"]
        assert http.get("/sessions", headers={"Authorization": f"Bearer {alice}", "X-API-Key": alice}).status_code == 200  # the same key twice
        before = snapshot(db_url)
        for bearer, header_key in [(alice, "hxk_bogus"), ("hxk_bogus", alice), (alice, bob), (bob, alice), (KEYS["ops"], alice)]:
            headers = {"Authorization": f"Bearer {bearer}", "X-API-Key": header_key}
            refused = expect_error(http.get("/sessions", headers=headers), 401, "unauthenticated")
            assert refused["detail"] == {"reason": "conflicting_credentials"}
            expect_error(http.post("/sessions", headers=headers, json={"agent": "concierge", "message": "hi"}), 401, "unauthenticated")
        assert snapshot(db_url) == before, "a refused request changed the ledger"
