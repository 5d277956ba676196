"""The operator's page in a real headless Chromium, against a real uvicorn on loopback.

Debian's ``chromium`` and ``chromium-driver`` packages, driven by Selenium (no browser download).
Outside CI the test skips, saying how to install them; in CI (``.ci/run`` installs them) it must run.
The test signs in, follows a session that was killed mid-tool and recovered (its calls, and a
timeline with the model's text, the append checkpoint and each saved call), filters the list by
status and agent, stops and retries through the page, then approves and denies through it as an
approver (watching the page update itself from the SSE stream) and submits a client result and an
error through it as the owner.

``HELIX_DBOS_UI_SCREENSHOTS=docs/ui`` saves the screenshots docs/ui.md shows.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helix_dbos import apikeys
from helix_dbos.recovery import OUTCOME_UNKNOWN
from tests.conftest import one_database
from tests.processes.test_service import ROOT, Service, read_sse, services  # noqa: F401 (services is a fixture)
from tests.support.waiting import wait_for

INSTALL = "apt-get install chromium chromium-driver && pip install selenium (or: pip install -e '.[test]')"
KEYS = {name: apikeys.new_key() for name in ("alice", "appr")}
KEYS_ENV = {apikeys.ENV: ",".join([apikeys.entry_line(KEYS["alice"], "alice"), apikeys.entry_line(KEYS["appr"], "appr", {"approver"})])}


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"the browser test must run in CI: {why}")
    pytest.skip(f"no headless Chromium: {why}; install with: {INSTALL}")


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service as ChromeService
    except ImportError:
        _unavailable("selenium is not installed")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        _unavailable("chromium or chromedriver is not on PATH")
    options = Options()
    options.binary_location = str(binary)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1500,1000", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=ChromeService(str(driver_path)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shoot(driver: Any, name: str) -> None:
    target = os.environ.get("HELIX_DBOS_UI_SCREENSHOTS")
    if target:
        path = (ROOT / target) if not os.path.isabs(target) else Path(target)
        path.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path / f"{name}.png"))


def sign_in(driver: Any, base: str, who: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/ui")
    wait_for("the sign-in form", lambda: driver.find_element(By.ID, "key"), tolerate=(Exception,)).send_keys(KEYS[who])
    driver.find_element(By.ID, "signin").click()
    wait_for(f"signed in as {who}", lambda: who in driver.find_element(By.ID, "who").text, tolerate=(Exception,))


def call_row(driver: Any, tool: str, seat: str | None = None) -> Any:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, f'#calls tr.call[data-tool="{tool}"]')
    if seat is not None:
        rows = [r for r in rows if f'"seat":"{seat}"' in r.find_element(By.CSS_SELECTOR, "td.args").text]
    return rows[0]


@pytest.mark.kills
def test_operator_page_follows_a_recovered_session_and_decides_an_approval(db_url: str, tmp_path: Path, services: Callable[..., Service], browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    alice = {"Authorization": f"Bearer {KEYS['alice']}"}
    executor = f"ui-{uuid.uuid4().hex[:6]}"
    effects = tmp_path / "effects.jsonl"
    service = services(executor, extra_env={**KEYS_ENV, "HELIX_DBOS_DEMO_EFFECTS": str(effects), "HELIX_DBOS_DEMO_SLOW": "30", "HELIX_DBOS_DEMO_EMAIL_SEC": "30"})

    # unauthenticated: the sign-in page, not the sessions
    browser.get(f"{service.base}/ui")
    assert browser.find_element(By.ID, "key") and "Sessions" not in browser.page_source

    # a session killed mid-tool (the email and seat A2 are mid-body), recovered by a restart
    sid = httpx.post(f"{service.base}/sessions", headers=alice, json={"agent": "errands", "message": "the usual"}).json()["session_id"]
    both = threading.Event()
    started: set[str] = set()

    def watch(event: dict[str, Any]) -> None:
        if event["type"] == "tool_start":
            started.add(event["data"]["tool_name"] + str(event["data"]["args"].get("seat", "")))
        if {"send_email", "reserve_seatA2"} <= started:
            both.set()

    reader = threading.Thread(target=read_sse, args=(service.base, sid), kwargs={"on_event": watch, "headers": alice}, daemon=True)
    reader.start()
    assert both.wait(60), service.output()
    time.sleep(0.2)
    service.kill()
    restarted = services(executor, extra_env={**KEYS_ENV, "HELIX_DBOS_DEMO_EFFECTS": str(effects)})
    done = read_sse(restarted.base, sid, headers=alice)
    assert done.end is not None and done.end["status"] == "completed", restarted.output()
    calls = {c["args"].get("seat", c["tool_name"]): c for c in httpx.get(f"{restarted.base}/sessions/{sid}", headers=alice).json()["calls"]}

    sign_in(browser, restarted.base, "alice")
    row = wait_for("the session in the list", lambda: browser.find_element(By.CSS_SELECTOR, f'#sessions tr[data-session="{sid}"]'), tolerate=(Exception,))
    assert "completed" in row.text and "errands" in row.text and "alice" in row.text
    shoot(browser, "sessions")
    row.find_element(By.TAG_NAME, "a").click()
    wait_for("the session page", lambda: browser.find_element(By.ID, "sid").text == sid, tolerate=(Exception,))
    email = call_row(browser, "send_email")
    assert email.get_attribute("data-status") == "outcome_unknown"
    assert OUTCOME_UNKNOWN in email.find_element(By.CSS_SELECTOR, "td.told").text
    assert email.get_attribute("data-dispatch") == calls["send_email"]["dispatch_id"]
    assert "#1 lost" in email.find_element(By.CSS_SELECTOR, "td.attempts").text
    assert "answered outcome_unknown by recovery" in email.find_element(By.CSS_SELECTOR, "td.recovery").text
    seat = call_row(browser, "reserve_seat", "A2")
    assert seat.get_attribute("data-status") == "ok" and seat.get_attribute("data-dispatch") == calls["A2"]["dispatch_id"]
    assert "run_again" in seat.find_element(By.CSS_SELECTOR, "td.recovery").text
    attempts = seat.find_element(By.CSS_SELECTOR, "td.attempts").text
    assert "#1 lost" in attempts and "#2 ok" in attempts, attempts
    assert "run_again" in browser.find_element(By.ID, "events").text  # the timeline shows the recovery events
    # ... and the model's steps and the saved append: the reply's text, its checkpoint, each saved call's dispatch id
    said = [r.text for r in browser.find_elements(By.CSS_SELECTOR, '#events tr[data-type="model_text"]')]
    assert any("model (step 0): I'll save your seat preference" in t for t in said), said
    assert any("model (step 1): Done, except send_email" in t for t in said), said
    checkpoints = [r.text for r in browser.find_elements(By.CSS_SELECTOR, '#events tr[data-type="checkpoint"]')]
    assert any("append checkpoint, step 0" in t for t in checkpoints), checkpoints
    saved = [r.text for r in browser.find_elements(By.CSS_SELECTOR, '#events tr[data-type="call_saved"]')]
    assert any("saved send_email" in t and calls["send_email"]["dispatch_id"] in t for t in saved), saved
    shoot(browser, "recovered-session")
    assert [line for line in effects.read_text().splitlines() if "send_email" in line].__len__() == 1

    # Stop and Retry through the page, as the owner
    other = httpx.post(f"{restarted.base}/sessions", headers=alice, params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Rome"}).json()["session_id"]
    browser.get(f"{restarted.base}/ui/sessions/{other}")
    wait_for("the Stop button", lambda: browser.find_element(By.ID, "stop"), tolerate=(Exception,)).click()
    wait_for("the stopped run", lambda: "interrupted" in browser.find_element(By.ID, "status").text, tolerate=(Exception,))
    wait_for("the Retry button", lambda: browser.find_element(By.ID, "retry"), tolerate=(Exception,)).click()
    wait_for("the retried run", lambda: len(browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == 2, tolerate=(Exception,))
    assert "retry" in browser.find_element(By.ID, "runs").text
    runs = httpx.get(f"{restarted.base}/sessions/{other}", headers=alice).json()["runs"]
    assert [r["entry"] for r in runs] == ["start", "retry"] and runs[0]["status"] == "interrupted"

    # filters: each leaves out the sessions that do not match (the completed errands one, a concierge one waiting for approval)
    denied = httpx.post(f"{restarted.base}/sessions", headers=alice, params={"wait": 30}, json={"agent": "concierge", "message": "Dinner for two in Braga"}).json()
    dsid = denied["session_id"]
    assert denied["status"] == "suspended_client_tool"

    def listed(query: str = "") -> set[str]:
        if query:
            browser.get(f"{restarted.base}/ui{query}")
        return {r.get_attribute("data-session") for r in browser.find_elements(By.CSS_SELECTOR, "#sessions tr[data-session]")}

    assert {sid, other, dsid} <= listed("?")
    by_status = listed("?status=completed")
    assert sid in by_status and dsid not in by_status, by_status
    by_status = listed("?status=suspended_client_tool")
    assert dsid in by_status and sid not in by_status, by_status
    assert listed("?agent=errands") == {sid}
    assert listed("?status=suspended_client_tool&agent=errands") == set()  # dsid matches the status only, sid the agent only
    browser.get(f"{restarted.base}/ui")
    Select(browser.find_element(By.ID, "f-agent")).select_by_value("concierge")  # the form, as a person would use it
    browser.find_element(By.ID, "filter").click()
    wait_for("the filtered list", lambda: "agent=concierge" in browser.current_url, tolerate=(Exception,))
    assert listed() == {other, dsid}

    # an approval, decided through the page by the approver, with live updates from SSE
    waiting = httpx.post(f"{restarted.base}/sessions", headers=alice, params={"wait": 30}, json={"agent": "concierge", "message": "Dinner for two in Porto"}).json()
    csid, approval = waiting["session_id"], waiting["pending"][0]["dispatch_id"]
    browser.find_element(By.ID, "logout").click()
    wait_for("signed out", lambda: browser.find_elements(By.ID, "key"), tolerate=(Exception,))
    sign_in(browser, restarted.base, "appr")
    browser.get(f"{restarted.base}/ui/sessions/{csid}")
    wait_for("the SSE stream", lambda: browser.find_element(By.ID, "live").text == "live", tolerate=(Exception,))
    row = call_row(browser, "book_table")
    assert row.get_attribute("data-dispatch") == approval and "awaiting approval" in row.text
    # the ledger's one suspended status says in words what it waits for
    assert "waiting for 1 approval" in browser.find_element(By.ID, "status").text
    # the ledger's step and position, written as two numbers (it read "1.0", like a float)
    [asked] = [c for c in httpx.get(f"{restarted.base}/sessions/{csid}", headers=alice).json()["calls"] if c["dispatch_id"] == approval]
    assert row.find_elements(By.TAG_NAME, "td")[1].text == f"{asked['step']}, {asked['position']}"
    shoot(browser, "approval")
    row.find_element(By.CSS_SELECTOR, "input.reason").send_keys("fine by me")
    row.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_for("the decided approval", lambda: "approved by appr: fine by me" in call_row(browser, "book_table").find_element(By.CSS_SELECTOR, "td.approval").text, tolerate=(Exception,))
    client = wait_for("the client call", lambda: call_row(browser, "add_to_calendar"), tolerate=(Exception,))
    assert client.get_attribute("data-status") == "pending"
    wait_for("the client wait, in words", lambda: "waiting for 1 client tool result" in browser.find_element(By.ID, "status").text, tolerate=(Exception,))
    # the run that waited for the approval ended there; the answer's run went on
    first = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")[0].text
    assert "suspended_client_tool" in first and "the session went on in run 2" in first, first
    # the approver may not answer the owner's client tool: the page shows the API's refusal
    client.find_element(By.CSS_SELECTOR, "textarea.result").send_keys('{"calendar_id": "evt-1"}')
    client.find_element(By.CSS_SELECTOR, "button.submit-result").click()
    wait_for("the refusal", lambda: "forbidden" in browser.find_element(By.ID, "flash").text, tolerate=(Exception,))
    # the owner answers elsewhere; the open page follows the stream and shows the completed run
    wait_for("the SSE stream again", lambda: browser.find_element(By.ID, "live").text == "live", tolerate=(Exception,))
    client_id = client.get_attribute("data-dispatch")
    answered = httpx.post(f"{restarted.base}/sessions/{csid}/calls/{client_id}/result", headers=alice, params={"wait": 30}, json={"result": {"calendar_id": "evt-1"}})
    assert answered.status_code == 200, answered.text
    wait_for("the live update to completed", lambda: "completed" in browser.find_element(By.ID, "status").text, tolerate=(Exception,))
    decided = browser.find_elements(By.CSS_SELECTOR, '#events tr[data-type="approval_decided"]')
    assert decided and "appr" in decided[0].text and "fine by me" in decided[0].text
    shoot(browser, "approved-session")
    [stored] = [c for c in httpx.get(f"{restarted.base}/sessions/{csid}", headers=alice).json()["calls"] if c["tool_name"] == "book_table"]
    assert stored["approval_actor"] == "appr" and stored["approved"] is True

    # Deny through the page, as the approver: the call says who denied it and why, and the run ends
    browser.get(f"{restarted.base}/ui/sessions/{dsid}")
    row = wait_for("the call to deny", lambda: call_row(browser, "book_table"), tolerate=(Exception,))
    assert row.get_attribute("data-dispatch") == denied["pending"][0]["dispatch_id"]
    row.find_element(By.CSS_SELECTOR, "input.reason").send_keys("too dear")
    row.find_element(By.CSS_SELECTOR, "button.deny").click()
    wait_for("the denial", lambda: "denied by appr: too dear" in call_row(browser, "book_table").find_element(By.CSS_SELECTOR, "td.approval").text, tolerate=(Exception,))
    wait_for("the run after the denial", lambda: "completed" in browser.find_element(By.ID, "status").text, tolerate=(Exception,))
    assert call_row(browser, "book_table").get_attribute("data-status") == "denied"
    [stored] = [c for c in httpx.get(f"{restarted.base}/sessions/{dsid}", headers=alice).json()["calls"] if c["tool_name"] == "book_table"]
    assert stored["approved"] is False and stored["approval_actor"] == "appr" and stored["status"] == "denied"

    # Submit result and Submit as error through the page, as the owner, on two sessions waiting for the client
    appr = {"Authorization": f"Bearer {KEYS['appr']}"}
    waiting_client = []
    for city in ("Faro", "Evora"):
        run = httpx.post(f"{restarted.base}/sessions", headers=alice, params={"wait": 30}, json={"agent": "concierge", "message": f"Dinner for two in {city}"}).json()
        ok = httpx.post(f"{restarted.base}/sessions/{run['session_id']}/calls/{run['pending'][0]['dispatch_id']}/approval", headers=appr, params={"wait": 30}, json={"approved": True})
        assert ok.status_code == 200, ok.text
        waiting_client.append((run["session_id"], ok.json()["run"]["pending"][0]["dispatch_id"]))
    browser.find_element(By.ID, "logout").click()
    wait_for("signed out", lambda: browser.find_elements(By.ID, "key"), tolerate=(Exception,))
    sign_in(browser, restarted.base, "alice")
    answers = (("button.submit-result", '{"calendar_id": "evt-2"}', "ok", "evt-2", "in your calendar"), ("button.submit-error", "calendar is down", "error", "calendar is down", "calendar entry failed"))
    for (session, dispatch), (button, typed, status, told, reply) in zip(waiting_client, answers):
        browser.get(f"{restarted.base}/ui/sessions/{session}")
        client = wait_for("the client call", lambda: call_row(browser, "add_to_calendar"), tolerate=(Exception,))
        assert client.get_attribute("data-dispatch") == dispatch and client.get_attribute("data-status") == "pending"
        client.find_element(By.CSS_SELECTOR, "textarea.result").send_keys(typed)
        client.find_element(By.CSS_SELECTOR, button).click()
        wait_for(f"the call answered {status}", lambda: call_row(browser, "add_to_calendar").get_attribute("data-status") == status, tolerate=(Exception,))
        wait_for("the run after the answer", lambda: "completed" in browser.find_element(By.ID, "status").text, tolerate=(Exception,))
        assert told in call_row(browser, "add_to_calendar").find_element(By.CSS_SELECTOR, "td.told").text
        assert any(reply in r.text for r in browser.find_elements(By.CSS_SELECTOR, '#events tr[data-type="model_text"]')), reply
    stored_calls = [next(c for c in httpx.get(f"{restarted.base}/sessions/{s_}", headers=alice).json()["calls"] if c["tool_name"] == "add_to_calendar") for s_, _ in waiting_client]
    assert stored_calls[0]["result"] == {"calendar_id": "evt-2"} and stored_calls[0]["error"] is None
    assert stored_calls[1]["error"] == {"type": "client_error", "message": "calendar is down"} and stored_calls[1]["result"] is None


ATTACK = """<!doctype html><html><head><title>prize</title></head><body>
<form id="form" method="POST" action="{base}/sessions/{waiting}/stop" target="sink1"><input name="kind" value="abort"></form>
<form id="plain" method="POST" enctype="text/plain" action="{base}/sessions/{stopped}/retry" target="sink2"><input name='{{"message": "x", "y": "' value='"}}'></form>
<iframe name="sink1" id="sink1"></iframe><iframe name="sink2" id="sink2"></iframe>
<script>
  var settled = [];
  function note(name) {{ return function (r) {{ settled.push(name + ":" + (r && r.type ? r.type : "error")); document.title = settled.join(" "); }}; }}
  var opts = {{ method: "POST", mode: "no-cors", credentials: "include" }};
  fetch("{base}/sessions/{stopped}/resume", opts).then(note("resume"), note("resume"));
  fetch("{base}/sessions/{stopped}/retry", opts).then(note("retry"), note("retry"));
  fetch("{base}/sessions/{waiting}/stop", Object.assign({{ headers: {{ "Content-Type": "text/plain" }}, body: '{{"kind": "abort"}}' }}, opts)).then(note("stop"), note("stop"));
  fetch("{base}/sessions/{waiting}/stop", {{ method: "POST", credentials: "include", headers: {{ "Content-Type": "application/json" }}, body: "{{}}" }}).then(note("json"), note("json"));
  document.getElementById("form").submit();
  document.getElementById("plain").submit();
</script></body></html>"""


@pytest.fixture
def attacker() -> Iterator[Callable[[str], str]]:
    """A page on another port of the same host (same site, another origin), serving what it is given."""
    import http.server

    served: dict[str, bytes] = {}

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            body = served.get("page", b"")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def host(html: str) -> str:
        served["page"] = html.encode()
        return f"http://127.0.0.1:{server.server_address[1]}/"

    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()


@one_database  # the cookie's scope, set by the HTTP layer
def test_a_page_on_another_port_cannot_use_the_signed_in_cookie(db_url: str, services: Callable[..., Service], browser: Any, attacker: Callable[[str], str]) -> None:
    """SameSite=Strict does not stop another origin of the same site (127.0.0.1 on
    another port). Its auto-submitting forms (urlencoded and text/plain) and no-cors fetches (empty
    and text/plain bodies) reach the service with alice's cookie, and change nothing: the ledger
    shows no stop, no retry, no resume."""
    from selenium.webdriver.common.by import By

    from tests.processes.test_service import snapshot

    alice = {"Authorization": f"Bearer {KEYS['alice']}"}
    service = services(f"csrf-{uuid.uuid4().hex[:6]}", extra_env=KEYS_ENV)
    waiting = httpx.post(f"{service.base}/sessions", headers=alice, params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Porto"}, timeout=60).json()
    assert waiting["status"] == "suspended_client_tool", waiting
    victim = httpx.post(f"{service.base}/sessions", headers=alice, params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Rome"}, timeout=60).json()
    halted = httpx.post(f"{service.base}/sessions/{victim['session_id']}/stop", headers=alice, params={"wait": 30}, json={}, timeout=60)
    assert halted.status_code == 202 and halted.json()["status"] == "interrupted", halted.text
    sign_in(browser, service.base, "alice")  # the browser now holds alice's cookie for 127.0.0.1
    before = snapshot(db_url)

    page = attacker(ATTACK.format(base=service.base, waiting=waiting["session_id"], stopped=victim["session_id"]))
    assert f":{service.base.rsplit(':', 1)[1]}/" not in page  # another port: another origin, the same site
    browser.get(page)
    wait_for("the four fetches to settle", lambda: len(browser.title.split()) == 4, tolerate=(Exception,))
    settled = dict(part.split(":") for part in browser.title.split())
    assert settled["json"] == "error", settled  # a JSON post needs a CORS preflight the service never grants
    for sink in ("sink1", "sink2"):  # both forms were posted with the cookie, and refused before being read
        def refused() -> bool:
            browser.switch_to.frame(browser.find_element(By.ID, sink))
            try:
                return "unsupported_media_type" in browser.find_element(By.TAG_NAME, "body").text
            finally:
                browser.switch_to.default_content()

        wait_for(f"the service's answer in {sink}", refused, tolerate=(Exception,))

    after = snapshot(db_url)
    assert after == before, "a page on another origin changed the ledger"
    assert after["counts"]["stops"] == 1  # only alice's own stop, through the API with her key
    runs = httpx.get(f"{service.base}/sessions/{victim['session_id']}", headers=alice).json()["runs"]
    assert [r["entry"] for r in runs] == ["start"] and runs[0]["status"] == "interrupted"
    assert httpx.get(f"{service.base}/sessions/{waiting['session_id']}", headers=alice).json()["status"] == "suspended_client_tool"
