"""What every way in refuses or renders safely: CSRF through the /ui cookie, strict ids and Host
headers, the published schema, NUL in query parameters, odd stored values on every read path,
probing ids, CLI numbers, things passed as tools that are not tools.

The HTTP tests run the real app in-process (Starlette's TestClient runs its lifespan: the runtime
launches DBOS on the test database, SQLite and Postgres); the CLI tests run the installed
``helix-dbos``. The browser test (a page on another port of the same host) is test_ui.py's
``test_a_page_on_another_port_cannot_use_the_signed_in_cookie``.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage
from typer.testing import CliRunner

import helix_dbos as hx
from helix_dbos import apikeys
from helix_dbos.cli.main import app as cli
from helix_dbos.definitions.inputs import SESSION_ID_PATTERN, TEXT_PATTERN, check_session_id
from helix_dbos.errors import ConfigurationError, ValidationError
from helix_dbos.ledger import tables as t
from helix_dbos.ledger.engine import create_sync_engine
from helix_dbos.loader import load_runtime
from helix_dbos.service import auth
from helix_dbos.service.app import create_app
from helix_dbos.service.settings import ServiceSettings, host_name
from tests.conftest import one_database
from tests.processes.test_service import expect_error, snapshot

BIN = Path(sys.executable).parent
KEYS = {name: apikeys.new_key() for name in ("alice", "bob", "carol@example.com")}
ENTRIES = apikeys.parse(",".join(apikeys.entry_line(k, n) for n, k in KEYS.items()))
ODD = "nul:\x00 high:\ud800 low:\udfff end"
USAGE = RequestUsage(input_tokens=3, output_tokens=2)


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


@contextmanager
def serving(db_url: str, runtime: hx.Runtime | None = None, *, keys: bool = False, host: str = "127.0.0.1") -> Iterator[TestClient]:
    """The service over the bundled examples (or ``runtime``), in-process, on a trusted Host."""
    target = runtime or load_runtime(None, database_url=db_url)
    settings = ServiceSettings(host=host, keys=ENTRIES if keys else [], allowed_hosts=["localhost", "127.0.0.1", "::1", "testserver"])
    with TestClient(create_app(target, settings=settings), raise_server_exceptions=False, base_url="http://localhost") as http:
        yield http


# --- ids, Host headers, the published schema ---------------------------------------------------------


@one_database  # refused by the session id rule before any read
def test_dot_and_dotdot_are_not_session_ids_at_any_door(db_url: str) -> None:
    for bad in (".", ".."):
        with pytest.raises(ValidationError):
            check_session_id(bad)
    for fine in ("...", ".a", "a.", "..x", "a.b"):
        assert check_session_id(fine) == fine
    with serving(db_url) as http:
        before = snapshot(db_url)
        for bad in (".", ".."):
            expect_error(http.post("/sessions", json={"agent": "concierge", "message": "hi", "session_id": bad}), 400, "validation_error")
        # percent-encoded, a client does not normalise them away; the path parameter is refused
        for bad in ("%2E", "%2E%2E"):
            expect_error(http.get(f"/sessions/{bad}"), 400, "validation_error")
            expect_error(http.post(f"/sessions/{bad}/stop", json={}), 400, "validation_error")
        assert snapshot(db_url) == before
    runner = CliRunner()
    for bad in (".", ".."):
        out = runner.invoke(cli, ["show", bad, "--db", db_url])
        assert out.exit_code == 1 and "validation_error" in out.output and "Traceback" not in out.output, out.output


@one_database  # HTTP parsing, before any read
def test_the_host_header_is_parsed_strictly(db_url: str) -> None:
    for header, name in [("localhost", "localhost"), ("localhost:8000", "localhost"), ("[::1]:80", "::1"), ("[::1]", "::1"), ("::1", "::1"), ("127.0.0.1:65535", "127.0.0.1")]:
        assert host_name(header) == name, header
    refused = ["localhost:evil.com", "[::1]evil.com", "[::1]:evil.com", "localhost:8000:1", "localhost:", "localhost:99999", "localhost:+80", "local host", "[evil.com]:80", "localhost:\uff18\uff10"]  # fullwidth digits
    for header in refused:
        assert host_name(header) is None, header
    with serving(db_url) as http:
        assert http.get("/sessions", headers={"Host": "localhost:8000"}).status_code == 200
        for header in refused:
            expect_error(http.get("/sessions", headers={"Host": header.encode()}), 400, "host_not_allowed")


@one_database  # the OpenAPI schema and request validation, before any read
def test_the_schema_publishes_the_cursor_the_id_and_the_byte_rules(db_url: str) -> None:
    with serving(db_url) as http:
        spec = http.get("/openapi.json").json()
        events = spec["paths"]["/sessions/{session_id}/events"]["get"]
        [cursor] = [p for p in events["parameters"] if p["name"] == "Last-Event-ID"]
        pattern = cursor["schema"].get("pattern") or next(s["pattern"] for s in cursor["schema"]["anyOf"] if "pattern" in s)
        assert re.fullmatch(pattern, "42") and not re.search(pattern, "abc") and not re.search(pattern, "1.5")
        posts = [op for ops in spec["paths"].values() for method, op in ops.items() if method == "post"]
        assert posts and all("415" in op["responses"] for op in posts)
        live = spec["paths"]["/sessions/{session_id}/live"]["get"]["responses"]
        assert {"401", "404"} <= set(live), live
        start = spec["components"]["schemas"]["StartSession"]["properties"]
        sid = next(s for s in start["session_id"]["anyOf"] if s.get("type") == "string")
        assert sid["pattern"] == SESSION_ID_PATTERN and sid["maxLength"] == 64
        assert start["message"]["pattern"] == TEXT_PATTERN
        for name, field in [("NewTurn", "message"), ("ResumeWithMessage", "message"), ("RetryFromCheckpoint", "message"), ("Approval", "reason"), ("ClientFailed", "error")]:
            assert spec["components"]["schemas"][name]["properties"][field]["pattern"] == TEXT_PATTERN, name
        assert spec["components"]["schemas"]["ResumeFromCheckpoint"]["properties"]["checkpoint_id"]["maxLength"] == 80
        # text parameters publish the byte rule too (every one is checked, storable_parameters)
        listing = {p["name"]: p for p in spec["paths"]["/sessions"]["get"]["parameters"]}
        approval = {p["name"]: p for p in spec["paths"]["/sessions/{session_id}/calls/{dispatch_id}/approval"]["post"]["parameters"]}
        run = {p["name"]: p for p in spec["paths"]["/runs/{run_id}"]["get"]["parameters"]}
        live_params = {p["name"]: p for p in spec["paths"]["/sessions/{session_id}/live"]["get"]["parameters"]}
        for param in (listing["status"], listing["agent"], approval["dispatch_id"], run["run_id"], live_params["run_id"]):
            assert param["schema"]["pattern"] == TEXT_PATTERN, param
        for path, param in [("/sessions/{session_id}", "session_id"), ("/sessions/{session_id}/stop", "session_id")]:
            op = spec["paths"][path].get("get") or spec["paths"][path]["post"]
            [p] = [p for p in op["parameters"] if p["name"] == param]
            assert p["schema"]["pattern"] == SESSION_ID_PATTERN and p["schema"]["maxLength"] == 64

        # the schema and the service agree on these bodies (the service's 400 is the byte or id rule)
        validator = jsonschema.Draft202012Validator({**spec["components"]["schemas"]["StartSession"], "components": spec["components"]})
        before = snapshot(db_url)
        for body in ({"agent": "concierge", "message": "a\x00b"}, {"agent": "concierge", "message": "a\ud800b"}, {"agent": "concierge", "message": "hi", "session_id": "."}, {"agent": "concierge", "message": "hi", "session_id": ".."}):
            assert not validator.is_valid(body), body
            raw = json.dumps(body).encode()  # \u0000 and \ud800 as JSON escapes, as a client sends them
            expect_error(http.post("/sessions", content=raw, headers={"content-type": "application/json"}), 400, "validation_error")
        assert validator.is_valid({"agent": "concierge", "message": "emoji 😀 fine", "session_id": "..."})
        assert snapshot(db_url) == before
        expect_error(http.get("/sessions/x/events", headers={"Last-Event-ID": "abc"}), 400, "validation_error")


# --- NUL in parameters, odd values on every read path (HTTP and CLI) ---------------------------------


@one_database  # request validation, before any read
def test_nul_in_any_query_or_path_parameter_is_a_typed_400(db_url: str) -> None:
    with serving(db_url) as http:
        sid = http.post("/sessions", params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Porto"}).json()["session_id"]
        before = snapshot(db_url)
        for method, url in [
            ("GET", "/sessions?status=a%00b"),
            ("GET", "/sessions?agent=a%00b"),
            ("GET", "/sessions?agent=concierge&status=%00"),
            ("GET", "/ui?status=a%00b"),
            ("GET", "/ui?agent=a%00b"),
            ("GET", f"/sessions/{sid}/live?run_id=a%00b&timeout=1"),
            ("GET", f"/sessions/{sid}/events?x%00=1"),
            ("GET", "/runs/a%00b"),
            ("GET", "/ui/sessions/a%00b"),
            ("GET", f"/sessions/{sid}%00"),
            ("POST", f"/sessions/{sid}/calls/a%00b/approval"),
            ("POST", f"/sessions/{sid}/calls/a%00b/result"),
            ("POST", f"/sessions/{sid}/stop?wait=%00"),
        ]:
            body = {"approved": True} if url.endswith("approval") else {"result": 1} if url.endswith("result") else {} if method == "POST" else None
            expect_error(http.request(method, url, json=body), 400, "validation_error")
        # bytes that are not UTF-8 arrive as U+FFFD: a filter that matches nothing, not an error
        assert http.get("/sessions?status=%ED%A0%80").json() == []
        assert http.get("/ui?agent=%FF").status_code == 200
        assert snapshot(db_url) == before


def _odd_runtime(db_url: str) -> hx.Runtime:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            args = json.dumps({"text": ODD})
            return ModelResponse(parts=[TextPart("thinking " + ODD), ToolCallPart("echo", args, "c1"), ToolCallPart("boom", args, "c2")], usage=USAGE)
        return ModelResponse(parts=[TextPart("done " + ODD)], usage=USAGE)

    @hx.tool
    async def echo(ctx: hx.ToolContext, text: str) -> dict[str, Any]:
        """Echo the text back."""
        return {"echo": text, text: "as a key", "list": [text, 1.5]}

    @hx.tool
    async def boom(ctx: hx.ToolContext, text: str) -> str:
        """Fail with the text."""
        raise RuntimeError("bad " + text)

    return hx.Runtime([hx.Agent("odd", FunctionModel(reply), tools=[echo, boom])], database_url=db_url, executor_id=f"test-{uuid.uuid4().hex[:8]}")


def _store_non_finite(db_url: str, dispatch_id: str) -> bool:
    """Write NaN and Infinity into a stored tool result, where the database can hold them (SQLite's
    JSON text; Postgres's jsonb has no NaN, so a run cannot have stored one there)."""
    if not db_url.startswith("sqlite"):
        return False
    engine = create_sync_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(t.calls.update().where(t.calls.c.dispatch_id == dispatch_id).values(result={"echo": ODD, "nan": math.nan, "inf": math.inf, "-inf": -math.inf}))
    finally:
        engine.dispose()
    return True


def test_every_read_path_renders_nul_surrogates_and_non_finite_numbers(db_url: str) -> None:
    runtime = _odd_runtime(db_url)
    with serving(db_url, runtime) as http:
        run = http.post("/sessions", params={"wait": 60}, json={"agent": "odd", "message": "go"})
        assert run.status_code == 202 and run.json()["status"] == "completed", run.text
        sid, run_id = run.json()["session_id"], run.json()["run_id"]
        calls = {c["tool_name"]: c for c in http.get(f"/sessions/{sid}").json()["calls"]}
        non_finite = _store_non_finite(db_url, calls["echo"]["dispatch_id"])
        for url in (f"/sessions/{sid}", f"/runs/{run_id}", "/sessions", f"/sessions/{sid}/events", "/ui", f"/ui/sessions/{sid}", "/ui?agent=odd"):
            answer = http.get(url)
            assert answer.status_code == 200, (url, answer.text[:300])
            answer.content.decode("utf-8")  # strict: a lone surrogate travels escaped
        view = http.get(f"/sessions/{sid}").json()
        echoed = next(c for c in view["calls"] if c["tool_name"] == "echo")
        assert echoed["args"] == {"text": ODD}
        if non_finite:  # JSON has no NaN: they read as null, as JavaScript's JSON.stringify writes them
            assert echoed["result"] == {"echo": ODD, "nan": None, "inf": None, "-inf": None}
        page = http.get(f"/ui/sessions/{sid}").text
        assert "high:\\ud800" in page and "nul:\\u0000" in page and "bad nul:" in page
        for line in http.get(f"/sessions/{sid}/events").text.splitlines():
            if line.startswith("data: "):
                json.loads(line[6:], parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} in an SSE frame"))
    runner = CliRunner()
    for args in (["show", sid], ["show", sid, "--json"], ["calls", "--session", sid], ["calls", "--json"], ["sessions"], ["sessions", "--json"]):
        out = runner.invoke(cli, [*args, "--db", db_url])
        assert out.exit_code == 0 and out.exception is None, (args, out.output)
        if "--json" in args:
            json.loads(out.stdout)


# --- probing ids, CLI numbers, things that are not tools ---------------------------------------------


def test_a_chosen_session_id_reveals_nothing_about_other_owners(db_url: str) -> None:
    with serving(db_url, keys=True) as http:
        alices = http.post("/sessions", headers=bearer("alice"), params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Porto"}).json()
        sid = alices["session_id"]
        before = snapshot(db_url)
        taken = expect_error(http.post("/sessions", headers=bearer("bob"), json={"agent": "concierge", "message": "mine", "session_id": sid}), 404, "session_not_found")
        free_id = uuid.uuid4().hex
        free = expect_error(http.post("/sessions", headers=bearer("bob"), json={"agent": "concierge", "message": "mine", "session_id": free_id}), 404, "session_not_found")
        assert taken["error"].replace(sid, "ID") == free["error"].replace(free_id, "ID") and taken["detail"] == free["detail"] == {"namespace": "bob:"}
        # an id in another principal's namespace: the same answer again, free or not
        expect_error(http.post("/sessions", headers=bearer("bob"), json={"agent": "concierge", "message": "mine", "session_id": "alice:x"}), 404, "session_not_found")
        assert snapshot(db_url) == before
        # in one's own namespace an id is chosen freely, and naming it again is a new turn
        mine = http.post("/sessions", headers=bearer("bob"), params={"wait": 30}, json={"agent": "concierge", "message": "Lunch in Braga", "session_id": "bob:lunch"})
        assert mine.status_code == 202 and mine.json()["session_id"] == "bob:lunch", mine.text
        again = http.post("/sessions", headers=bearer("bob"), params={"wait": 30}, json={"agent": "concierge", "message": "Lunch in Faro", "session_id": "bob:lunch"})
        assert again.status_code == 202 and again.json()["session_id"] == "bob:lunch", again.text
        # one's own minted id is a new turn too; a principal whose name is not id-safe gets a hashed namespace
        turn = http.post("/sessions", headers=bearer("alice"), params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Faro", "session_id": sid})
        assert turn.status_code == 202 and turn.json()["session_id"] == sid, turn.text
        carol = auth.namespace(auth.Principal("carol@example.com"))
        assert re.fullmatch(r"u-[0-9a-f]{16}", carol)
        refused = expect_error(http.post("/sessions", headers=bearer("carol@example.com"), json={"agent": "concierge", "message": "hi", "session_id": "carol:x"}), 404, "session_not_found")
        assert refused["detail"] == {"namespace": carol + ":"}
        ok = http.post("/sessions", headers=bearer("carol@example.com"), params={"wait": 30}, json={"agent": "concierge", "message": "hi", "session_id": f"{carol}:x"})
        assert ok.status_code == 202, ok.text
        owners = {s["session_id"]: s["owner"] for s in http.get("/sessions", headers=bearer("bob")).json()}
        assert owners == {"bob:lunch": "bob"}


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["sessions", "--limit", "99999999999999999999999"], "--limit"),
        (["calls", "--limit", "9223372036854775808"], "--limit"),
        (["calls", "--limit", "0"], "--limit"),
        (["serve", "--port", "99999"], "--port"),
        (["serve", "--port", "-1"], "--port"),
    ],
)
def test_numbers_out_of_range_are_one_line_usage_errors(args: list[str], flag: str, tmp_path: Path) -> None:
    done = subprocess.run([str(BIN / "helix-dbos"), *args, "--db", f"sqlite:///{tmp_path / 'x.sqlite'}"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "validation_error" in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == "" and not (tmp_path / "x.sqlite").exists()


@pytest.mark.parametrize("bad", [..., "search_restaurants", lambda city: city, 42], ids=["ellipsis", "string", "function", "int"])
def test_an_agent_refuses_what_is_not_a_tool_at_construction(bad: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:
        hx.Agent("picky", TestModel(), tools=[bad])
    assert "tools[0]" in refused.value.message and type(bad).__name__ in refused.value.message and "@hx.tool" in refused.value.message
    with pytest.raises(ConfigurationError):
        hx.Agent("picky", TestModel(), tools="search_restaurants")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as refused:
        hx.Agent("picky", TestModel(), sub_agents=[bad])
    assert "sub_agents[0]" in refused.value.message


# --- without a browser: content types, the CSRF token, the Secure cookie -----------------------------


def _token(page: str) -> str:
    data = re.search(r"data-page='([^']*)'", page)
    assert data is not None, page[:500]
    import html

    return str(json.loads(html.unescape(data.group(1)))["csrf"])


@one_database  # HTTP content type and cookie checks, before any read
def test_state_changes_take_json_and_the_cookie_needs_the_pages_token(db_url: str) -> None:
    with serving(db_url, keys=True) as http:
        run = http.post("/sessions", headers=bearer("alice"), params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Porto"}).json()
        sid = run["session_id"]
        assert http.post("/ui/login", json={"key": KEYS["alice"]}).status_code == 200
        cookie = {"Cookie": f"{auth.COOKIE}={KEYS['alice']}"}
        http.cookies.clear()
        before = snapshot(db_url)
        # not JSON: refused before it is read, whoever sends it (an empty body to /retry and /resume included)
        for path in ("stop", "retry", "resume", "turns"):
            for headers, content in [({}, b""), ({"content-type": "application/x-www-form-urlencoded"}, b""), ({"content-type": "application/x-www-form-urlencoded"}, b"kind=abort"),
                                     ({"content-type": "text/plain"}, b'{"kind": "abort"}'), ({"content-type": "multipart/form-data; boundary=x"}, b"--x--")]:
                for who in (bearer("alice"), cookie):
                    expect_error(http.post(f"/sessions/{sid}/{path}", headers={**who, **headers}, content=content), 415, "unsupported_media_type")
        expect_error(http.post("/ui/logout", headers=cookie), 415, "unsupported_media_type")
        # JSON with the cookie but without the page's token: refused; a header key needs none
        expect_error(http.post(f"/sessions/{sid}/stop", headers=cookie, json={}), 403, "csrf_failed")
        expect_error(http.post(f"/sessions/{sid}/stop", headers={**cookie, "X-CSRF-Token": "0" * 64}), 415, "unsupported_media_type")
        expect_error(http.post(f"/sessions/{sid}/stop", headers={**cookie, "X-CSRF-Token": "0" * 64}, json={}), 403, "csrf_failed")
        expect_error(http.post("/sessions", headers=cookie, json={"agent": "concierge", "message": "hi"}), 403, "csrf_failed")
        assert snapshot(db_url) == before
        assert http.get(f"/sessions/{sid}", headers=cookie).status_code == 200  # reads need no token (EventSource sends none)
        token = _token(http.get(f"/ui/sessions/{sid}", headers=cookie).text)
        assert token == _token(http.get("/ui", headers=cookie).text) and KEYS["alice"] not in token
        stopped = http.post(f"/sessions/{sid}/stop", headers={**cookie, "X-CSRF-Token": token}, json={})
        assert stopped.status_code == 202 and stopped.json()["stopped"] is True, stopped.text
        # bob's token does not open alice's cookie
        bobs = auth.csrf_token(KEYS["bob"])
        expect_error(http.post(f"/sessions/{sid}/retry", headers={**cookie, "X-CSRF-Token": bobs}, json={}), 403, "csrf_failed")


@pytest.mark.parametrize(("host", "secure"), [("127.0.0.1", False), ("0.0.0.0", True), ("10.1.2.3", True)])
@one_database  # the cookie's flags, set by the HTTP layer
def test_the_cookie_is_secure_beyond_loopback(db_url: str, host: str, secure: bool) -> None:
    with serving(db_url, keys=True, host=host) as http:
        answer = http.post("/ui/login", json={"key": KEYS["alice"]})
        assert answer.status_code == 200
        flags = [f.strip().lower() for f in answer.headers["set-cookie"].split(";")]
        assert ("secure" in flags) is secure and "httponly" in flags and "samesite=strict" in flags
