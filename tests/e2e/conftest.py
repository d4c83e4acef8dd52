"""End-to-end fixtures: headless Chromium (Debian's chromium and chromium-driver, installed
by `make setup-dev`), the dashboard served on a free loopback port, and the integration
suite's fresh-warehouse fixture (SQLite and a real PostgreSQL server)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from pipelines.dashboard.app import make_dashboard_server

# the same session PostgreSQL server and per-test databases as the integration tests
from tests.integration.conftest import postgres, warehouse_url  # noqa: F401

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `make setup-dev` (as root it installs "
                    "the Debian packages chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,1000", "--hide-scrollbars",
                     "--lang=en-US"):
        options.add_argument(argument)
    # an explicit driver path: Selenium Manager must not try to download a browser or driver
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def serve_dashboard() -> Iterator[Callable[[str], str]]:
    """Factory: serve the dashboard over a warehouse URL; returns its base URL."""
    servers = []

    def start(url: str) -> str:
        server = make_dashboard_server(url, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
