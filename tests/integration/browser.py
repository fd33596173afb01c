"""Headless Chromium for the console tests, through selenium and chromedriver.

The browser is Debian's ``chromium`` with its ``chromium-driver``: nothing is downloaded but
those packages. When they are absent and the tests run as root, they are installed with apt-get
(as CI's clean clone needs); otherwise the tests are skipped with the reason. selenium itself
comes from the test extra (pyproject.toml).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)
_install_tried = False


def _find(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = shutil.which(name) or (
            f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None
        )
        if path:
            return path
    return None


def ensure_chromium() -> tuple[str, str]:
    """Paths of the browser and its driver, installing Debian's packages if need be."""
    global _install_tried
    browser, driver = _find(BROWSERS), _find(DRIVERS)
    if (browser is None or driver is None) and not _install_tried:
        _install_tried = True
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip("headless Chromium is missing: install chromium and chromium-driver")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, timeout=600)
        done = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"],
            env=env,
            timeout=1200,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.fail(f"apt-get install chromium chromium-driver failed: {done.stderr[-2000:]}")
        browser, driver = _find(BROWSERS), _find(DRIVERS)
    if browser is None or driver is None:
        pytest.skip("headless Chromium is missing: install chromium and chromium-driver")
    return browser, driver


def chromium(width: int = 1400, height: int = 1000) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()
