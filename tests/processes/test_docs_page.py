"""``/docs`` renders the schema in a real headless Chromium, from the service alone (no CDN).

The service publishes OpenAPI 3.1; a Swagger UI that reads only 3.0 answers 200 and then shows
"Unable to render this definition". So the test does not stop at the status code: it waits for
Swagger UI to render every operation of the schema (method and path), opens one, and checks that
every resource the page loaded came from the service itself. The page touches no database: one
SQLite service is enough. Skips outside CI without Chromium, as tests/processes/test_ui.py does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes.test_service import Service, start_service
from tests.processes.test_ui import browser  # noqa: F401 (browser is a fixture)
from tests.support.waiting import wait_for


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = start_service(f"sqlite:///{tmp_path / 'docs.sqlite'}", tmp_path, f"docs-{uuid.uuid4().hex[:6]}")
    try:
        yield running
    finally:
        running.stop()


def test_docs_renders_every_operation_offline(service: Service, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    spec = httpx.get(f"{service.base}/openapi.json", timeout=30).json()
    assert spec["openapi"].startswith("3.1")
    expected = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}

    browser.get(f"{service.base}/docs")

    def rendered() -> set[tuple[str, str]]:
        blocks = browser.find_elements(By.CSS_SELECTOR, ".opblock")
        return {
            (b.find_element(By.CSS_SELECTOR, ".opblock-summary-method").text.strip(), b.find_element(By.CSS_SELECTOR, ".opblock-summary-path").get_attribute("data-path"))
            for b in blocks
        }

    found = wait_for("Swagger UI to render every operation", lambda: (r := rendered()) >= expected and r, timeout=60, tolerate=(Exception,))
    assert found == expected
    assert "Unable to render this definition" not in browser.page_source
    assert browser.find_element(By.CSS_SELECTOR, ".info .title").text.startswith("helix-dbos")

    # an operation opens with its parameters and its request body's schema
    start = next(b for b in browser.find_elements(By.CSS_SELECTOR, ".opblock") if b.find_element(By.CSS_SELECTOR, ".opblock-summary-path").get_attribute("data-path") == "/sessions" and "opblock-post" in b.get_attribute("class"))
    start.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait_for("the operation's body schema", lambda: "StartSession" in start.text or "agent" in start.find_element(By.CSS_SELECTOR, ".opblock-body").text, tolerate=(Exception,))
    assert "start_session" in start.text  # the operation id is shown (displayOperationId)

    # everything the page loaded came from the service: it works on a machine with no internet
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith(service.base) for url in loaded), loaded
