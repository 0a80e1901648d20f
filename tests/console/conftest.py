"""Fixtures of the console's browser tests: the system chromium driven by Playwright, a page signed in as
admin that fails its test on any browser-side error, and screenshots.

The browser is the system package's (``apt-get install -y chromium``), launched with ``executable_path``:
nothing is downloaded (never ``playwright install``). Without it — or without the playwright package —
the browser tests are skipped with the reason, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support import IN_CI

CHROMIUM = os.environ.get("HEARTH_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _missing(what: str) -> None:
    message = f"{what}; install it with `apt-get install -y chromium` and `pip install playwright` (dev extra)"
    if IN_CI:
        pytest.fail(f"{message} — CI requires the browser tests", pytrace=False)
    pytest.skip(message)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Any]:
    """One Playwright driver and one Chromium per test process, shared by the browser tests (each gets its
    own context: cookies and storage are not shared). Starting both per test cost 1.5 s idle and 5-7 s on
    a loaded machine, a third of the suite's fixture time; the browser test modules therefore run on the
    session's event loop (``pytestmark`` there), where this browser lives."""
    if CHROMIUM is None:
        _missing("no chromium binary on PATH")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _missing("the playwright package is not installed")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


class Shots:
    """Screenshots of the pages a test visits, in its tmp dir (and the docs' directory when asked)."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "screenshots"
        self.dir.mkdir()
        extra = os.environ.get("HEARTH_TEST_SCREENSHOT_DIR")
        self.extra = Path(extra) if extra else None

    async def take(self, page: Any, name: str) -> Path:
        path = self.dir / f"console-{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000
        if self.extra is not None:
            self.extra.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, self.extra / path.name)
        return path


@pytest.fixture
def shots(tmp_path: Path) -> Shots:
    return Shots(tmp_path)


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Any, server: Any) -> AsyncIterator[Any]:
    """A page signed in as admin with the admin token, failing the test on any browser-side error."""
    context = await browser.new_context(base_url=server.base_url, viewport={"width": 1360, "height": 900})
    tab = await context.new_page()
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    # a request the page itself aborted (the playground's Stop) is not a failure
    tab.on("requestfailed", lambda r: problems.append(f"{r.url} failed: {r.failure}")
           if r.failure != "net::ERR_ABORTED" else None)
    tab.on("response", lambda r: problems.append(f"{r.url}: {r.status}") if r.status == 404 else None)
    await tab.goto("/console/")
    assert tab.url.endswith("/console/login?next=%2Fconsole%2Foverview")
    await tab.fill("input[name=secret]", "admin-token-xyz")
    await tab.click("button[type=submit]")
    await tab.wait_for_url("**/console/overview")
    yield tab
    await context.close()
    assert problems == []
