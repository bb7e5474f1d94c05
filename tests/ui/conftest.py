"""Fixtures of the browser tests: one corpus, one `recall ui` process and one headless Chromium
(Debian's chromium + chromium-driver, driven by Selenium) per test session.

The tests never skip: without chromium they fail saying what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.ui import corpus

ROOT = Path(__file__).resolve().parents[2]
#: Screenshots the tests take, kept as artifacts (CI uploads or inspects them).
ARTIFACTS = Path(os.environ.get("RECALL_UI_ARTIFACTS", ROOT / "build" / "ui-artifacts"))
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="session")
def ui_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus.build(tmp_path_factory.mktemp("ui"))


@pytest.fixture(scope="session")
def ui_server(ui_data: Path) -> Iterator[str]:
    """`recall ui --json` on a free loopback port: its printed URL (with the access token)."""
    recall = Path(sys.executable).with_name("recall")
    proc = subprocess.Popen([str(recall), "--data-dir", str(ui_data), "ui", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if not first:
            raise AssertionError(f"recall ui exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        info = orjson.loads(first)
        assert info["url"].startswith("http://127.0.0.1:") and info["tokenRequired"] is True
        yield str(info["url"])
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _browser_paths() -> tuple[str, str]:
    binary = next((p for p in map(shutil.which, CHROMIUM) if p), None)
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.fail("the browser tests need Chromium and its WebDriver: on Debian/Ubuntu "
                    "`apt-get install chromium chromium-driver` (.ci/run installs them); "
                    f"found chromium={binary}, chromedriver={driver}", pytrace=False)
    return binary, driver


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = _browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900", "--lang=en-US", "--no-first-run",
                 "--disable-extensions"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Any, ui_server: str, ui_data: Path) -> Iterator[Any]:
    """The browser at 1280 px in light mode, ready for `page.get(path)`: it opened the printed
    URL first, as a person does, so it holds the access token's cookie."""
    browser.set_window_size(1280, 900)
    browser.get(ui_server)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-color-scheme", "value": "light"}]})
    yield Page(browser, ui_server.split("/?token=", 1)[0], ui_data)


class Page:
    """The browser at the UI's base URL; `shot(name)` saves a screenshot artifact."""

    def __init__(self, driver: Any, base: str, data_dir: Path) -> None:
        self.driver, self.base, self.data_dir = driver, base, data_dir

    def get(self, path: str) -> Any:
        self.driver.get(self.base + path)
        return self.driver

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"ui-{name}.png"
        self.driver.save_screenshot(str(path))
        return path
