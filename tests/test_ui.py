"""The operator's page in a real headless Chromium, against a real uvicorn on loopback.

Debian's ``chromium`` and ``chromium-driver`` packages, driven by Selenium (no browser download).
Outside CI the test skips, saying how to install them; in CI (``.ci/run`` installs them) it must run.
The test signs in, follows a session that was killed mid-tool and recovered, then decides an
approval through the page and watches the page update itself from the SSE stream.

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
from tests.test_service import ROOT, Service, read_sse, services  # noqa: F401 (services is a fixture)

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


def wait_for(check: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # the page may be mid-reload
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last!r})" if last else ""))


def shoot(driver: Any, name: str) -> None:
    target = os.environ.get("HELIX_DBOS_UI_SCREENSHOTS")
    if target:
        path = (ROOT / target) if not os.path.isabs(target) else Path(target)
        path.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path / f"{name}.png"))


def sign_in(driver: Any, base: str, who: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/ui")
    wait_for(lambda: driver.find_element(By.ID, "key"), what="the sign-in form").send_keys(KEYS[who])
    driver.find_element(By.ID, "signin").click()
    wait_for(lambda: who in driver.find_element(By.ID, "who").text, what=f"signed in as {who}")


def call_row(driver: Any, tool: str, seat: str | None = None) -> Any:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, f'#calls tr.call[data-tool="{tool}"]')
    if seat is not None:
        rows = [r for r in rows if f'"seat":"{seat}"' in r.find_element(By.CSS_SELECTOR, "td.args").text]
    return rows[0]


def test_operator_page_follows_a_recovered_session_and_decides_an_approval(db_url: str, tmp_path: Path, services: Callable[..., Service], browser: Any) -> None:
    from selenium.webdriver.common.by import By

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
    row = wait_for(lambda: browser.find_element(By.CSS_SELECTOR, f'#sessions tr[data-session="{sid}"]'), what="the session in the list")
    assert "completed" in row.text and "errands" in row.text and "alice" in row.text
    shoot(browser, "sessions")
    row.find_element(By.TAG_NAME, "a").click()
    wait_for(lambda: browser.find_element(By.ID, "sid").text == sid, what="the session page")
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
    shoot(browser, "recovered-session")
    assert [line for line in effects.read_text().splitlines() if "send_email" in line].__len__() == 1

    # filters: only completed errands sessions
    browser.get(f"{restarted.base}/ui?status=completed&agent=errands")
    assert sid in browser.find_element(By.ID, "sessions").text

    # Stop and Retry through the page, as the owner
    other = httpx.post(f"{restarted.base}/sessions", headers=alice, params={"wait": 30}, json={"agent": "concierge", "message": "Dinner in Rome"}).json()["session_id"]
    browser.get(f"{restarted.base}/ui/sessions/{other}")
    wait_for(lambda: browser.find_element(By.ID, "stop"), what="the Stop button").click()
    wait_for(lambda: "interrupted" in browser.find_element(By.ID, "status").text, what="the stopped run")
    wait_for(lambda: browser.find_element(By.ID, "retry"), what="the Retry button").click()
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == 2, what="the retried run")
    assert "retry" in browser.find_element(By.ID, "runs").text
    runs = httpx.get(f"{restarted.base}/sessions/{other}", headers=alice).json()["runs"]
    assert [r["entry"] for r in runs] == ["start", "retry"] and runs[0]["status"] == "interrupted"

    # an approval, decided through the page by the approver, with live updates from SSE
    waiting = httpx.post(f"{restarted.base}/sessions", headers=alice, params={"wait": 30}, json={"agent": "concierge", "message": "Dinner for two in Porto"}).json()
    csid, approval = waiting["session_id"], waiting["pending"][0]["dispatch_id"]
    browser.find_element(By.ID, "logout").click()
    wait_for(lambda: browser.find_elements(By.ID, "key"), what="signed out")
    sign_in(browser, restarted.base, "appr")
    browser.get(f"{restarted.base}/ui/sessions/{csid}")
    wait_for(lambda: browser.find_element(By.ID, "live").text == "live", what="the SSE stream")
    row = call_row(browser, "book_table")
    assert row.get_attribute("data-dispatch") == approval and "awaiting approval" in row.text
    shoot(browser, "approval")
    row.find_element(By.CSS_SELECTOR, "input.reason").send_keys("fine by me")
    row.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_for(lambda: "approved by appr: fine by me" in call_row(browser, "book_table").find_element(By.CSS_SELECTOR, "td.approval").text, what="the decided approval")
    client = wait_for(lambda: call_row(browser, "add_to_calendar"), what="the client call")
    assert client.get_attribute("data-status") == "pending"
    # the approver may not answer the owner's client tool: the page shows the API's refusal
    client.find_element(By.CSS_SELECTOR, "textarea.result").send_keys('{"calendar_id": "evt-1"}')
    client.find_element(By.CSS_SELECTOR, "button.submit-result").click()
    wait_for(lambda: "forbidden" in browser.find_element(By.ID, "flash").text, what="the refusal")
    # the owner answers elsewhere; the open page follows the stream and shows the completed run
    wait_for(lambda: browser.find_element(By.ID, "live").text == "live", what="the SSE stream again")
    client_id = client.get_attribute("data-dispatch")
    answered = httpx.post(f"{restarted.base}/sessions/{csid}/calls/{client_id}/result", headers=alice, params={"wait": 30}, json={"result": {"calendar_id": "evt-1"}})
    assert answered.status_code == 200, answered.text
    wait_for(lambda: "completed" in browser.find_element(By.ID, "status").text, what="the live update to completed")
    decided = browser.find_elements(By.CSS_SELECTOR, '#events tr[data-type="approval_decided"]')
    assert decided and "appr" in decided[0].text and "fine by me" in decided[0].text
    shoot(browser, "approved-session")
    [stored] = [c for c in httpx.get(f"{restarted.base}/sessions/{csid}", headers=alice).json()["calls"] if c["tool_name"] == "book_table"]
    assert stored["approval_actor"] == "appr" and stored["approved"] is True
