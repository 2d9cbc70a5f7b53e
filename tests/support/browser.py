"""Debian's Chromium, driven by Playwright for Python, for the tests of the operator page (tests/api/ui/):
found on the PATH, else installed with apt-get (root only) as node.py installs Node. Playwright launches that
executable; it never downloads a browser of its own.

`open_browser()` is the tests' way in: it fails the test when Chromium cannot be had, and skips it instead
only with ATTACHSTORE_TEST_SKIP_SERVICES=1, as the S3 and PostgreSQL tests do."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright

from tests.support import fixtures, services

PACKAGES = ["chromium"]
NAMES = ("chromium", "chromium-browser")
# Every CSP violation the page causes, as the browser reports it to the page (an init script runs before the
# page's own and is not subject to its CSP).
WATCH_CSP = """window.__violations = [];
document.addEventListener("securitypolicyviolation", e => window.__violations.push(
    `${e.violatedDirective} refused ${e.blockedURI || "inline"}`));"""


class Unavailable(Exception):
    """Chromium could not be had; the message says why."""


def find() -> str:
    """The system's Chromium, installed first if missing."""
    found = next(filter(None, map(shutil.which, NAMES)), None)
    if found is None:
        log = Path(tempfile.gettempdir()) / "attachstore-chromium-apt.log"
        services.apt_install(PACKAGES, log)
        found = next(filter(None, map(shutil.which, NAMES)), None)
        if found is None:
            raise Unavailable(f"no chromium after apt-get install {' '.join(PACKAGES)}")
    return found


def require() -> str:
    try:
        return find()
    except (Unavailable, services.ServiceError, OSError, subprocess.SubprocessError) as e:
        if fixtures.skipping_services():
            pytest.skip(f"no Chromium ({fixtures.SKIP_VARIABLE}=1): {e}")
        pytest.fail(f"the operator page's browser tests need Debian's chromium: {e}")


@dataclass
class Watched:
    """A page with what went wrong on it: console errors, uncaught exceptions and CSP violations."""

    page: Page
    errors: list[str] = field(default_factory=list)

    async def problems(self) -> list[str]:
        violations: list[str] = await self.page.evaluate("window.__violations || []")
        return [*self.errors, *violations]

    async def images(self) -> list[dict[str, Any]]:
        """Each image of the page once loaded: its source and the width it decoded to (0: it did not)."""
        found: list[dict[str, Any]] = await self.page.evaluate(
            """Promise.all(Array.from(document.images, img => img.decode().catch(() => null).then(() => (
                {src: img.getAttribute("src"), complete: img.complete, width: img.naturalWidth}))))"""
        )
        return found


@asynccontextmanager
async def open_browser() -> AsyncIterator[Browser]:
    executable = require()
    async with async_playwright() as playwright:
        # As root (the tests' containers and CI), Chromium runs only without its sandbox.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = await playwright.chromium.launch(
            executable_path=executable, headless=True, args=[*args, "--disable-dev-shm-usage"]
        )
        try:
            yield browser
        finally:
            await browser.close()


async def watched(browser: Browser, width: int = 1280, height: int = 860) -> Watched:
    """A new page, in a context of its own (its own cookies), at a fixed viewport."""
    context = await browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
    await context.add_init_script(WATCH_CSP)
    page = await context.new_page()
    seen = Watched(page)

    def console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            seen.errors.append(f"console {message.type}: {message.text} ({message.location.get('url')})")

    page.on("console", console)
    page.on("pageerror", lambda e: seen.errors.append(f"uncaught: {e}"))
    return seen
