"""A headless Chromium (Debian's, driven by Playwright) for the web console's end-to-end tests, a
page per test with its screenshot kept as an artefact, and the brokers and clients of the interop
tests.

Playwright drives the system's ``chromium`` through ``executable_path``: it downloads no browser
of its own. Each test's last screen is saved to ``build/test-artifacts/console/<test>.png``
(``MAGNETAR_TEST_ARTIFACTS`` names another folder), passed or failed, so what the console showed
can be looked at after the run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.conftest import (  # noqa: F401  (fixtures the console tests use)
    broker,
    broker_factory,
    client,
    client_factory,
    pytest_runtest_makereport,
    topic,
)
from tests.needs import chromium_path

ARTIFACTS = Path(
    os.environ.get("MAGNETAR_TEST_ARTIFACTS", Path(__file__).parents[2] / "build" / "test-artifacts")
)


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """Playwright's sync API holds an event loop as running while it is open: kept for one module, so
    that the tests after it in this process can run their own (asyncio.run)."""
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # As root (CI, containers) Chromium's sandbox cannot start.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=executable, args=args, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, request) -> Iterator[object]:
    """A fresh browser context (its own sessionStorage) and page; the page's script errors fail
    the test, and its last screen is kept (see the module's docstring)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    folder = ARTIFACTS / "console"
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)
    try:
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    finally:
        context.close()
    assert not errors, f"the console's script failed: {errors}"
