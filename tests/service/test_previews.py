"""Previews for host UIs, GET /v1/attachments/{ref}/preview?size=N, through the real HTTP app: the ladder, the
format, derived once and stored like a variant, verified on read, visible where its source is, collected
with it (docs/api.md)."""

from __future__ import annotations

import asyncio
import hashlib
from io import BytesIO
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from PIL import Image, ImageDraw

from attachstore.api.common import STORE
from attachstore.maintenance import gc
from attachstore.refs import Ref
from attachstore.service import PREVIEW_SIZES, Store
from attachstore.service.previews import preview_spec
from tests.conftest import MakeClient
from tests.service.test_normalization import CountDerivations, photo
from tests.service.test_tenants import TENANTS, admit_as, auth
from tests.support import images
from tests.support.http import admit_ok, error_of

Client = TestClient[Any, Any]


async def admit(client: Client, data: bytes, **extra: Any) -> str:
    ref: str = (await admit_ok(client, data, **extra))[0]["ref"]
    return ref


async def preview(client: Client, ref: str, size: int | str = 256, **kw: Any) -> tuple[bytes, Any]:
    answer = await client.get(f"/v1/attachments/{ref}/preview?size={size}", **kw)
    assert answer.status == 200, await answer.text()
    return await answer.read(), answer.headers


def opened(data: bytes) -> tuple[str, tuple[int, int], int, str]:
    with Image.open(BytesIO(data)) as im:
        return im.format or "", im.size, getattr(im, "n_frames", 1), im.mode


def screenshot(width: int, height: int) -> bytes:
    """A PNG like a screenshot: flat panels and anti-aliased text, far more than 256 colours."""
    im = Image.new("RGB", (width, height), (245, 245, 245))
    draw = ImageDraw.Draw(im)
    draw.rectangle((0, 0, width, 40), fill=(40, 60, 90))
    for y in range(60, height - 20, 18):
        draw.text((20, y), "The dialog is cut off at the bottom edge " * 3, fill=(20, 20, 20))
    im.paste(images.noise(120, 90), (width - 140, 60))  # a photo in the page
    return images.encode(im, "PNG")


async def test_every_size_of_the_ladder_bounds_the_longer_side(client: Client) -> None:
    ref = await admit(client, images.jpeg(1024, 768))
    for size in PREVIEW_SIZES:
        data, headers = await preview(client, ref, size)
        fmt, (width, height), frames, _ = opened(data)
        assert (fmt, width, height, frames) == ("JPEG", size, size * 3 // 4, 1)
        assert headers["Content-Type"] == "image/jpeg"
        assert headers["ETag"] == f'"sha256:{hashlib.sha256(data).hexdigest()}"'
        assert headers["Cache-Control"] == "private, max-age=31536000, immutable"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
        assert len(data) <= preview_spec(size).max_bytes


async def test_the_preview_is_upright_and_without_metadata(client: Client) -> None:
    ref = await admit(client, photo(800, 600, orientation=6))  # stored landscape, shown portrait
    data, _ = await preview(client, ref, 128)
    assert opened(data)[1] == (96, 128)
    with Image.open(BytesIO(data)) as im:
        assert not im.getexif()


def logo(width: int, height: int) -> bytes:
    """A PNG with a transparent background."""
    im = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    ImageDraw.Draw(im).ellipse((10, 10, width - 10, height - 10), fill=(200, 30, 30, 255))
    return images.encode(im, "PNG")


def animation(width: int, height: int, frames: int) -> bytes:
    """A GIF of a square moving over a flat background."""
    shots = []
    for i in range(frames):
        im = Image.new("RGB", (width, height), (250, 250, 210))
        ImageDraw.Draw(im).rectangle((i * 20, 40, i * 20 + 100, 140), fill=(0, 90, 200))
        shots.append(im)
    out = BytesIO()
    shots[0].save(out, "GIF", save_all=True, append_images=shots[1:], duration=100, loop=0)
    return out.getvalue()


@pytest.mark.parametrize(
    ("source", "fmt", "size", "modes"),
    [
        (screenshot(1280, 800), "PNG", (512, 320), ("RGB", "P")),  # a screenshot stays sharp
        (logo(900, 600), "PNG", (512, 341), ("RGBA", "P")),  # transparency is kept
        # Alpha stays lossless: no full-colour PNG of noise fits, so its colours are reduced to a palette.
        (images.png(900, 600, "RGBA"), "PNG", (512, 341), ("P",)),
        (images.webp(900, 600), "WEBP", (512, 341), ("RGB",)),  # a WebP photo stays a WebP
        (images.jpeg(900, 600), "JPEG", (512, 341), ("RGB",)),  # a JPEG photo stays a JPEG
        (animation(700, 700, 5), "PNG", (512, 512), ("RGB", "P")),  # an animation: its first frame
    ],
    ids=["screenshot", "transparent", "transparent-noise", "webp-photo", "jpeg-photo", "animation"],
)
async def test_the_format_suits_the_source(
    client: Client, source: bytes, fmt: str, size: tuple[int, int], modes: tuple[str, ...]
) -> None:
    ref = await admit(client, source)
    data, headers = await preview(client, ref, 512)
    found = opened(data)
    assert found[:3] == (fmt, size, 1)
    assert found[3] in modes
    assert headers["Content-Type"] == f"image/{fmt.lower()}"


async def test_a_noisy_png_past_the_budget_stays_a_png_of_fewer_colours(client: Client) -> None:
    ref = await admit(
        client, images.png(1024, 1024)
    )  # noise: no full-colour PNG of it fits 512 KiB at 512 px
    data, _ = await preview(client, ref, 512)
    assert opened(data)[:2] == ("PNG", (512, 512))
    assert opened(data)[3] == "P"


async def test_a_small_still_image_is_its_own_preview(client: Client) -> None:
    source = images.png(200, 100)
    ref = await admit(client, source)
    counter = CountDerivations(client.app[STORE])
    for size in (256, 512):
        data, headers = await preview(client, ref, size)
        assert data == source
        assert headers["ETag"] == f'"{ref}"'
    assert counter.calls == 0
    # Over the size, it is derived.
    data, _ = await preview(client, ref, 128)
    assert opened(data)[1] == (128, 64)
    assert counter.calls == 1


async def test_a_small_animation_is_previewed_as_a_still(client: Client) -> None:
    ref = await admit(client, images.gif_animated(40, 30, 4))
    data, _ = await preview(client, ref, 64)
    assert opened(data)[:3] == ("PNG", (40, 30), 1)


@pytest.mark.parametrize("query", ["size=100", "size=064", "size=%2B64", "size=", "", "size=64&size=128"])
async def test_a_size_off_the_ladder_is_400_with_a_hint(client: Client, query: str) -> None:
    ref = await admit(client, images.png(20, 20))
    answer = await client.get(f"/v1/attachments/{ref}/preview?{query}")
    error = await error_of(answer)
    assert (answer.status, error["code"]) == (400, "INVALID_REQUEST")
    assert "64, 128, 256 or 512" in error["hint"]


async def test_refs_are_checked_as_for_a_read(client: Client) -> None:
    answer = await client.get("/v1/attachments/sha256:ABC/preview?size=64")
    assert (answer.status, (await error_of(answer))["code"]) == (400, "INVALID_ATTACHMENT_REF")
    absent = str(Ref.of("sha256", b"never admitted"))
    answer = await client.get(f"/v1/attachments/{absent}/preview?size=64")
    assert (answer.status, (await error_of(answer))["code"]) == (404, "ATTACHMENT_NOT_FOUND")


async def test_derived_once_under_concurrent_requests_then_stored(client: Client) -> None:
    store = client.app[STORE]
    ref = await admit(client, photo(1600, 1200))
    counter = CountDerivations(store, together=12)
    answers = await asyncio.gather(*(preview(client, ref, 256) for _ in range(12)))
    assert counter.calls == 1
    assert len({data for data, _ in answers}) == 1
    data = answers[0][0]
    link = await store.index.variant(ref, preview_spec(256).key)
    assert link is not None
    row = link.row
    assert row.ref == f"sha256:{hashlib.sha256(data).hexdigest()}"
    assert store.local is not None
    assert store.local.path(Ref.parse(row.ref)).read_bytes() == data  # content-addressed, as any object
    assert (await preview(client, ref, 256))[0] == data
    assert counter.calls == 1


async def test_a_conditional_get_answers_304_without_reading(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = client.app[STORE]
    ref = await admit(client, photo(1024, 768))
    _, headers = await preview(client, ref, 64)
    etag = headers["ETag"]

    async def no_reads(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("a 304 reads nothing")

    monkeypatch.setattr(store.blobs, "read", no_reads)
    answer = await client.get(f"/v1/attachments/{ref}/preview?size=64", headers={"If-None-Match": etag})
    assert answer.status == 304
    assert answer.headers["ETag"] == etag
    assert answer.headers["Cache-Control"] == "private, max-age=31536000, immutable"
    assert await answer.read() == b""
    monkeypatch.undo()
    # Another size has another ETag: read in full.
    answer = await client.get(f"/v1/attachments/{ref}/preview?size=128", headers={"If-None-Match": etag})
    assert answer.status == 200


async def test_head_answers_the_headers(client: Client) -> None:
    ref = await admit(client, photo(1024, 768))
    data, headers = await preview(client, ref, 128)
    head = await client.head(f"/v1/attachments/{ref}/preview?size=128")
    assert head.status == 200
    assert head.headers["Content-Length"] == str(len(data))
    assert head.headers["ETag"] == headers["ETag"]


async def test_damaged_preview_bytes_are_never_served(client: Client) -> None:
    store = client.app[STORE]
    ref = await admit(client, photo(1024, 768))
    first, _ = await preview(client, ref, 256)
    link = await store.index.variant(ref, preview_spec(256).key)
    assert link is not None
    row = link.row
    assert store.local is not None
    path = store.local.path(Ref.parse(row.ref))
    path.chmod(0o644)
    path.write_bytes(images.flip(path.read_bytes(), 200))
    again, _ = await preview(client, ref, 256)
    assert again == first  # the damage was found, and the same bytes derived again
    assert path.read_bytes() == first


async def test_a_preview_is_visible_exactly_where_its_source_is(make_client: MakeClient) -> None:
    client = await make_client(tenants=TENANTS)
    ref = await admit_as(client, "alpha", photo(1024, 768))
    data, headers = await preview(client, ref, 128, headers=auth("alpha"))
    for tenant in ("beta", "alpha"):
        etag = headers["ETag"].strip('"')
        # The preview's own ref has no grant: it is reached through its source only.
        answer = await client.get(f"/v1/attachments/{etag}", headers=auth(tenant))
        assert (answer.status, (await error_of(answer))["code"]) == (404, "ATTACHMENT_NOT_FOUND")
    for extra in ({}, {"If-None-Match": headers["ETag"]}):
        answer = await client.get(
            f"/v1/attachments/{ref}/preview?size=128", headers={**auth("beta"), **extra}
        )
        assert (answer.status, (await error_of(answer))["code"]) == (404, "ATTACHMENT_NOT_FOUND")
    # Once beta admits the same bytes, it sees the source and so its preview.
    assert await admit_as(client, "beta", photo(1024, 768)) == ref
    assert (await preview(client, ref, 128, headers=auth("beta")))[0] == data


async def _previewed(make_client: MakeClient, **extra: Any) -> tuple[Store, str, str]:
    client = await make_client()
    store = client.app[STORE]
    if extra.get("session"):
        assert (await client.put(f"/v1/sessions/{extra['session']}", json={})).status == 201
    ref = await admit(client, photo(1024, 768), **extra)
    await preview(client, ref, 64)
    link = await store.index.variant(ref, preview_spec(64).key)
    assert link is not None
    row = link.row
    return store, ref, row.ref


async def test_gc_collects_a_preview_with_its_source(make_client: MakeClient) -> None:
    store, ref, made = await _previewed(make_client)
    row = await store.index.get(made)
    assert row is not None
    plan = await gc.plan(store, grace=0, now=row.lease_at + 3600)
    result = await gc.execute(store, plan)
    assert set(result.collected) == {ref, made}
    assert store.local is not None
    assert not store.local.path(Ref.parse(made)).exists()


async def test_the_preview_of_a_held_source_survives_gc(make_client: MakeClient) -> None:
    store, ref, made = await _previewed(make_client, session="s1")
    row = await store.index.get(made)
    assert row is not None
    await gc.execute(store, await gc.plan(store, grace=0, now=row.lease_at + 3600))
    assert await store.index.get(made) is not None
    assert await store.index.get(ref) is not None
