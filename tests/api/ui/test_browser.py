"""The operator page in a real browser (Debian's Chromium through Playwright, tests/support/browser.py): it
loads with no console error and no CSP violation, every thumbnail decodes, paging works, another tenant's
sessions never appear, the login sets the cookie as docs/ui.md says and refuses a wrong token. It also writes
the screenshot docs/ui.md shows, from fixed data at a fixed viewport, the same on every run."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from PIL import Image, ImageDraw
from playwright.async_api import expect

from attachstore.api import make_app
from attachstore.api.common import STORE
from attachstore.api.ui import pages
from attachstore.api.ui.views import CSP
from attachstore.index import Hold, SessionRow
from tests.api.ui.test_auth import TENANTS, TOKENS
from tests.conftest import MakeConfig
from tests.support import browser
from tests.support.http import b64
from tests.support.serving import DaemonTestServer

ROOT = Path(__file__).resolve().parents[3]
SCREENSHOT = ROOT / "docs" / "ui-sessions.png"
DAY = 86400.0
START = 1_793_000_000.0  # 2026-10-26: the sessions' fixed times, so that the screenshot is the same each run
ROUTES = ["claude-sonnet-4-5", "gpt-4o", None]
COLOURS = ["#3b6ea5", "#c0504d", "#9bbb59", "#8064a2", "#4bacc6", "#f79646", "#2c4d75", "#772c2a"]


def picture(i: int) -> bytes:
    """A small PNG, different for each `i`, the same on every run."""
    width, height = (320, 200) if i % 3 else (200, 260)
    image = Image.new("RGB", (width, height), COLOURS[i % len(COLOURS)])
    draw = ImageDraw.Draw(image)
    draw.ellipse(
        (20 + i * 7 % 60, 20, width - 30, height - 40 + i % 20), fill=COLOURS[(i + 3) % len(COLOURS)]
    )
    draw.rectangle((10, height - 30, 10 + 25 * (i % 9 + 1), height - 12), fill="#ffffff")
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def no_guard(session: SessionRow) -> None:
    pass


async def fill(server: DaemonTestServer) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """Alpha's 24 sessions and beta's 3, each session with up to 5 images, at fixed times: alpha's ids (newest
    used first), beta's, and the refs each of alpha's sessions holds."""
    index = server.app[STORE].index
    url = server.make_url("/v1/attachments")
    refs: list[str] = []
    async with aiohttp.ClientSession() as http:
        for tenant in ("alpha", "beta"):
            body = {
                "source": "user",
                "images": [{"data": b64(picture(i)), "name": f"shot-{i}.png"} for i in range(12)],
            }
            headers = {"Authorization": f"Bearer {TOKENS[tenant]}", "Content-Type": "application/json"}
            async with http.post(url, data=json.dumps(body), headers=headers) as answer:
                assert answer.status == 201, await answer.text()
                if tenant == "alpha":
                    refs = [a["ref"] for a in (await answer.json())["attachments"]]
    alpha, held = [], {}
    for i in range(24):
        key = ("alpha", f"agent-{i:02d}-{['review', 'chat', 'mcp'][i % 3]}")
        at = START + i * DAY / 4
        # what `attachstore mcp` makes expires after 30 idle days; the others have no lifetime
        await index.create_session(
            key, ROUTES[i % 3], at, round(30 * DAY) if key[1].endswith("mcp") else None
        )
        held[key[1]] = [refs[(i + k) % len(refs)] for k in range(i % 6)]
        if held[key[1]]:
            await index.add_holds(Hold(key, no_guard), held[key[1]], at)
        alpha.insert(0, key[1])
    beta = [f"beta-secret-{i}" for i in range(3)]
    for i, id_ in enumerate(beta):
        await index.create_session(("beta", id_), None, START + 30 * DAY + i)
    return alpha, beta, held


async def settled(seen: browser.Watched) -> list[str]:
    """What went wrong on the page once it and its images loaded, with each image that failed to decode."""
    await seen.page.wait_for_load_state("load")
    bad = [f"image did not decode: {i['src']}" for i in await seen.images() if not i["width"]]
    return [*await seen.problems(), *bad]


async def test_the_operator_page_in_a_browser(make_config: MakeConfig, aiohttp_server: Any) -> None:
    assert pages.SESSIONS_PAGE == 20  # two pages of alpha's 24 sessions
    server = await aiohttp_server(make_app(make_config(tenants=TENANTS)))
    alpha, beta, held = await fill(server)
    base = str(server.make_url("/ui/"))
    async with browser.open_browser() as chromium:
        seen = await browser.watched(chromium)
        page = seen.page

        await page.goto(base)
        assert page.url.endswith("/ui/login")
        await page.fill("#token", "not-a-token")
        await page.click("button[type=submit]")
        assert await page.text_content("[role=alert]") == "That token is not one the daemon knows."
        assert await page.context.cookies() == []
        refused = [e for e in seen.errors if "401" in e]  # the refused login's status, as Chromium logs it
        seen.errors[:] = [e for e in seen.errors if e not in refused]

        await page.fill("#token", TOKENS["alpha"])
        await page.click("button[type=submit]")
        assert page.url == base
        [cookie] = await page.context.cookies()
        assert (cookie["name"], cookie["value"], cookie["path"]) == ("attachstore_ui", TOKENS["alpha"], "/ui")
        assert (cookie["httpOnly"], cookie["sameSite"], cookie["secure"]) == (True, "Strict", False)
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: no script of the page reads it
        assert await settled(seen) == []

        await page.click("nav >> text=Sessions")
        assert await settled(seen) == []
        first = await page.locator("table.sessions tbody tr td:first-child a").all_text_contents()
        assert first == alpha[:20]
        thumbnails = await page.locator("table.sessions img").count()
        assert thumbnails == sum(min(len(held[s]), pages.THUMBNAILS) for s in alpha[:20]) > 0
        await page.screenshot(path=SCREENSHOT, full_page=False)

        await page.click("a[rel=next]")
        assert await settled(seen) == []
        second = await page.locator("table.sessions tbody tr td:first-child a").all_text_contents()
        assert second == alpha[20:]
        assert await page.locator("a[rel=next]").count() == 0
        await page.click("a[rel=first]")
        assert await page.locator("table.sessions tbody tr td:first-child a").all_text_contents() == first

        busiest = next(s for s in alpha if len(held[s]) == 5)
        await page.click(f"text={busiest}")
        assert await settled(seen) == []
        assert await page.locator("a.ref").all_text_contents() == sorted(held[busiest])  # held at once
        await page.click("a.ref >> nth=0")
        assert await settled(seen) == []
        ref = await page.input_value("#ref")
        assert ref in held[busiest]
        assert await page.locator(".preview img").evaluate("img => img.naturalWidth") > 0
        await page.click("button.copy-button")  # the page's one script: shown, and it answers
        await expect(page.locator("button.copy-button")).to_have_text(re.compile("^(Copied|Selected: .*)$"))
        assert busiest in await page.locator("ul.holders").inner_text()

        for name in ("gc and audit", "Quarantine", "Overview"):
            await page.click(f"nav >> text={name}")
            assert await settled(seen) == []

        for path in ("/ui/sessions", "/ui/sessions?prefix=beta"):
            await page.goto(str(server.make_url(path)))
            text = await page.inner_text("body")
            assert not any(b in text for b in beta), path
        answer = await page.goto(str(server.make_url(f"/ui/sessions/{beta[0]}")))
        assert answer is not None
        assert answer.status == 404
        assert await page.text_content("[role=alert]") == f"no session {beta[0]!r}"
        seen.errors.clear()  # the 404, logged as a failed load

        await page.click("button:text('Log out')")
        assert page.url.endswith("/ui/login")
        assert await page.context.cookies() == []


async def test_the_harness_sees_what_the_csp_refuses_and_images_that_do_not_decode(
    aiohttp_server: Any,
) -> None:
    # Without this, "no problems" above could mean that nothing was watched.
    html = (
        '<!doctype html><body style="color: red"><script>console.log("ran")</script>'
        '<img src="/broken.png"><img src="http://203.0.113.1/x.png"></body>'
    )

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html", headers={"Content-Security-Policy": CSP})

    async def broken(request: web.Request) -> web.Response:
        return web.Response(body=b"not a png", content_type="image/png")

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/broken.png", broken)
    server = await aiohttp_server(app)
    async with browser.open_browser() as chromium:
        seen = await browser.watched(chromium)
        await seen.page.goto(str(server.make_url("/")))
        problems = "\n".join(await settled(seen))
    assert "style-src-attr refused inline" in problems
    assert "script-src-elem refused inline" in problems
    assert "img-src refused http://203.0.113.1/x.png" in problems
    assert "image did not decode: /broken.png" in problems


def test_the_docs_show_the_screenshot_the_browser_test_writes() -> None:
    text = (ROOT / "docs" / "ui.md").read_text()
    assert re.search(r"!\[[^\]]*\]\(ui-sessions\.png\)", text)
    assert SCREENSHOT.exists()
