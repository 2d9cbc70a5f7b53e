"""The operator page's pages through the real app: what each shows, to whom, and that lists are paged."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from attachstore.api.common import STORE
from attachstore.api.ui import pages
from attachstore.api.ui.views import CSP
from tests.api.ui.test_auth import TENANTS, TOKENS, login
from tests.conftest import MakeClient
from tests.support.faults import flip_byte
from tests.support.http import Client, b64, object_path
from tests.support.images import png


async def admit_as(client: Client, tenant: str, *images: bytes, session: str | None = None) -> list[str]:
    body: dict[str, Any] = {"source": "user", "images": [{"data": b64(i)} for i in images]}
    if session is not None:
        body["session"] = session
    answer = await client.post(
        "/v1/attachments",
        data=io.BytesIO(json.dumps(body).encode()),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKENS[tenant]}"},
    )
    assert answer.status == 201, await answer.text()
    return [a["ref"] for a in (await answer.json())["attachments"]]


async def make_session(client: Client, tenant: str, session: str) -> None:
    answer = await client.put(
        f"/v1/sessions/{session}",
        data=b"{}",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKENS[tenant]}"},
    )
    assert answer.status == 201, await answer.text()


@pytest.fixture
async def tenants(make_client: MakeClient) -> Client:
    return await make_client(tenants=TENANTS)


async def page(client: Client, path: str, status: int = 200) -> str:
    answer = await client.get(path, allow_redirects=False)
    assert answer.status == status, await answer.text()
    assert answer.headers["Content-Type"] == "text/html; charset=utf-8"
    assert answer.headers["Content-Security-Policy"] == CSP
    assert answer.headers["Cache-Control"] == "no-store"
    text = await answer.text()
    assert "<script>" not in text
    assert "style=" not in text
    return text


async def test_an_attachment_page_shows_its_metadata_holders_preview_and_ref(tenants: Client) -> None:
    for session in ("s-b", "s-a"):
        await make_session(tenants, "alpha", session)
    [ref] = await admit_as(tenants, "alpha", png(40, 30), session="s-a")
    await admit_as(tenants, "alpha", png(40, 30), session="s-b")
    await login(tenants, TOKENS["alpha"])
    text = await page(tenants, f"/ui/attachments/{ref}")
    assert f'value="{ref}" readonly' in text
    assert "40 × 30" in text
    assert "image/png" in text
    assert f'src="/ui/attachments/{ref}/preview?size={pages.LARGE}"' in text
    assert re.findall(r'href="/ui/sessions/([^"]+)"', text) == ["s-a", "s-b"]
    preview = await tenants.get(f"/ui/attachments/{ref}/preview?size={pages.LARGE}")
    assert preview.status == 200
    assert Image.open(io.BytesIO(await preview.read())).size == (40, 30)


async def test_another_tenants_attachment_is_not_found(tenants: Client) -> None:
    [ref] = await admit_as(tenants, "alpha", png(20, 20))
    await login(tenants, TOKENS["beta"])
    text = await page(tenants, f"/ui/attachments/{ref}", 404)
    assert f"no attachment {ref}" in text
    assert (await tenants.get(f"/ui/attachments/{ref}/preview?size=128")).status == 404


async def test_a_malformed_ref_is_a_page_that_says_so(tenants: Client) -> None:
    await login(tenants, TOKENS["alpha"])
    text = await page(tenants, "/ui/attachments/not-a-ref", 400)
    assert "not-a-ref" in text


async def test_the_holders_are_paged(tenants: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "PAGE", 2)
    ids = [f"s{i}" for i in range(5)]
    for session in ids:
        await make_session(tenants, "alpha", session)
    [ref] = await admit_as(tenants, "alpha", png(8, 8))
    for session in ids:
        await admit_as(tenants, "alpha", png(8, 8), session=session)
    await login(tenants, TOKENS["alpha"])
    seen: list[str] = []
    path = f"/ui/attachments/{ref}"
    while True:
        text = await page(tenants, path)
        seen += re.findall(r'href="/ui/sessions/([^"]+)"', text)
        following = re.search(r'href="([^"]+)" rel="next"', text)
        if following is None:
            break
        path = following[1].replace("&amp;", "&")
    assert seen == ids


async def test_quarantine_shows_the_tenants_damaged_objects(tenants: Client, data_dir: Path) -> None:
    image = png(30, 30)
    [ref] = await admit_as(tenants, "alpha", image)
    flip_byte(object_path(data_dir, ref), len(image) // 2)
    read = await tenants.get(f"/v1/attachments/{ref}", headers={"Authorization": f"Bearer {TOKENS['alpha']}"})
    assert read.status == 500  # found damaged: quarantined
    await login(tenants, TOKENS["alpha"])
    assert ref in await page(tenants, "/ui/quarantine")
    await login(tenants, TOKENS["beta"])
    text = await page(tenants, "/ui/quarantine")
    assert ref not in text
    assert "Nothing is quarantined." in text


async def test_maintenance_shows_the_last_gc_and_audit(client: Client) -> None:
    assert "No gc or audit has run on this store yet." in await page(client, "/ui/maintenance")
    index = client.app[STORE].index
    await index.record_run("gc", {"collected": 3, "collected_bytes": 2048.0, "skipped": 0}, now=86400.0)
    await index.record_run("audit", {"corrupt": 1}, now=2 * 86400.0)
    text = await page(client, "/ui/maintenance")
    assert text.index("Garbage collection") < text.index("Audit (attachstore audit)")
    assert "1970-01-02 00:00:00 UTC" in text
    assert "collected bytes: 2048" in text
    assert "corrupt: 1" in text


async def test_an_unknown_page_is_a_page_not_json(client: Client) -> None:
    assert "the operator page has nothing at /ui/nowhere" in await page(client, "/ui/nowhere", 404)


async def test_ui_redirects_to_the_page_and_serves_its_static_files(client: Client) -> None:
    answer = await client.get("/ui", allow_redirects=False)
    assert (answer.status, answer.headers["Location"]) == (308, "/ui/")
    css = await client.get("/ui/static/ui.css")
    assert (css.status, css.content_type) == (200, "text/css")
    js = await client.get("/ui/static/ui.js")
    assert (js.status, js.content_type) == (200, "text/javascript")
    assert (await client.get("/ui/static/../pages.py")).status == 404


def sessions_shown(text: str) -> list[str]:
    return re.findall(r'<td><a href="/ui/sessions/([^"]+)">', text)


async def walk(client: Client, path: str, found: Any) -> list[str]:
    """Every page from `path` on, following "Next page": what `found` finds on each, in order."""
    seen: list[str] = []
    while True:
        text = await page(client, path)
        seen += found(text)
        following = re.search(r'href="([^"]+)" rel="next"', text)
        if following is None:
            return seen
        path = following[1].replace("&amp;", "&")


async def test_the_sessions_are_the_tenants_newest_used_first_paged(
    tenants: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "SESSIONS_PAGE", 2)
    for i in range(5):
        await make_session(tenants, "alpha", f"a{i}")
    await make_session(tenants, "beta", "b0")
    await login(tenants, TOKENS["alpha"])
    assert await walk(tenants, "/ui/sessions", sessions_shown) == ["a4", "a3", "a2", "a1", "a0"]
    assert await walk(tenants, "/ui/sessions?prefix=a3", sessions_shown) == ["a3"]
    await login(tenants, TOKENS["beta"])
    assert await walk(tenants, "/ui/sessions", sessions_shown) == ["b0"]
    assert "no session &#39;a1&#39;" in await page(tenants, "/ui/sessions/a1", 404)


async def test_a_session_shows_its_first_images_and_its_page_all_of_them(
    tenants: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "THUMBNAILS", 2)
    monkeypatch.setattr(pages, "PAGE", 2)
    await make_session(tenants, "alpha", "s")
    # held at once: in ref order
    refs = sorted(await admit_as(tenants, "alpha", *(png(10 + i, 10) for i in range(5)), session="s"))
    await login(tenants, TOKENS["alpha"])
    listing = await page(tenants, "/ui/sessions")
    thumbnails = re.findall(r'<img src="/ui/attachments/([^/]+)/preview\?size=128"', listing)
    assert thumbnails == refs[:2]
    assert "+3 more" in listing
    shown = await walk(
        tenants, "/ui/sessions/s", lambda t: re.findall(r'class="ref" href="/ui/attachments/([^"]+)"', t)
    )
    assert shown == refs


async def test_the_overview_shows_the_tenants_own_totals(tenants: Client) -> None:
    await make_session(tenants, "alpha", "s")
    await admit_as(tenants, "alpha", png(20, 20), png(21, 20), session="s")
    await admit_as(tenants, "beta", png(22, 20))
    await login(tenants, TOKENS["alpha"])
    text = await page(tenants, "/ui/")
    assert "What tenant <code>alpha</code> admitted and holds." in text
    assert re.search(r"<dt>Objects</dt><dd>2</dd>", text)
    assert re.search(r'<dt>Sessions</dt><dd><a href="/ui/sessions">1</a></dd>', text)
    assert '<td>image/png</td><td class="number">2</td>' in text
    assert "Free space" not in text  # the store's alone


async def test_the_overview_in_open_mode_is_the_whole_store(client: Client) -> None:
    text = await page(client, "/ui/")
    assert "The whole store." in text
    assert "Free space" in text
