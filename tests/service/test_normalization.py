"""Normalization at admission ([admission] oversize = "fit", strip_metadata) and request variants, through
the real HTTP app (docs/normalization.md)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from io import BytesIO
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from PIL import Image, ImageDraw

from attachstore.api.common import STORE
from attachstore.config import Route
from attachstore.index import ObjectRow
from attachstore.maintenance import gc
from attachstore.refs import Ref
from attachstore.render.plan import variant_spec
from attachstore.service import Store
from tests.conftest import MakeClient
from tests.support import images
from tests.support.http import post_json
from tests.support.waiting import eventually

GPS_IFD = 0x8825
ORIENTATION = 0x0112


def photo(width: int, height: int, *, orientation: int = 1, gps: bool = True, quality: int = 92) -> bytes:
    """A JPEG photo with a red marker in its top-left corner, an EXIF orientation and GPS tags."""
    grey = Image.new("L", (width, height), 128)
    im = Image.merge("RGB", (grey, grey, Image.linear_gradient("L").resize((width, height))))
    ImageDraw.Draw(im).rectangle((0, 0, width // 8, height // 8), fill=(255, 0, 0))
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    if gps:
        exif.get_ifd(GPS_IFD).update({1: "N", 2: (52.0, 31.0, 12.0), 3: "E", 4: (13.0, 24.0, 36.0)})
    return images.encode(im, "JPEG", quality=quality, exif=exif.tobytes())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def admit(client: TestClient[Any, Any], data: bytes, **extra: Any) -> Any:
    answer = await post_json(
        client, "/v1/attachments", {"source": "user", "images": [{"data": b64(data)}], **extra}
    )
    return answer.status, await answer.json()


async def read(client: TestClient[Any, Any], ref: str) -> bytes:
    answer = await client.get(f"/v1/attachments/{ref}")
    assert answer.status == 200
    return await answer.read()


def exif_of(data: bytes) -> Image.Exif:
    with Image.open(BytesIO(data)) as im:
        return im.getexif()


FIT = {"admission": {"oversize": "fit"}}


async def test_an_oversize_photo_is_fitted_upright_and_without_gps(make_client: MakeClient) -> None:
    client = await make_client(**FIT)
    original = photo(4000, 3000, orientation=6)  # 6: the camera was turned; upright it is 3000x4000
    status, body = await admit(client, original)
    assert status == 201, body
    a = body["attachments"][0]
    limits = client.app[STORE].config.limits
    assert max(a["width"], a["height"]) <= limits.max_side
    assert a["width"] * a["height"] <= limits.max_pixels
    assert a["bytes"] <= limits.max_image_bytes
    assert (a["width"], a["height"]) == (1500, 2000)  # orientation applied, aspect ratio 3:4 kept
    normalized = a["normalized"]
    assert normalized["original"] == {
        "media_type": "image/jpeg",
        "bytes": len(original),
        "width": 4000,
        "height": 3000,
    }
    assert {"orientation", "metadata", "resized", "reencoded"} <= set(normalized["steps"])
    stored = await read(client, a["ref"])
    assert a["ref"] == "sha256:" + hashlib.sha256(stored).hexdigest()
    exif = exif_of(stored)
    assert GPS_IFD not in exif
    assert not exif.get_ifd(GPS_IFD)
    assert exif.get(ORIENTATION, 1) == 1
    with Image.open(BytesIO(stored)) as im:
        # The marker was in the top-left corner of the sensor; turned upright (orientation 6: rotate 90°
        # clockwise) it is in the top-right corner.
        rgb = im.convert("RGB")
        red, green, _ = rgb.getpixel((im.width - 20, 20))
        assert red > 200
        assert green < 60
        assert rgb.getpixel((20, 20))[0] < 200


async def test_fitting_is_deterministic_so_the_same_upload_gives_the_same_ref(
    make_client: MakeClient,
) -> None:
    client = await make_client(**FIT)
    original = photo(3000, 2400)
    first = (await admit(client, original))[1]["attachments"][0]["ref"]
    second = (await admit(client, original))[1]["attachments"][0]["ref"]
    assert first == second


async def test_a_clean_image_within_the_limits_keeps_its_exact_bytes(make_client: MakeClient) -> None:
    client = await make_client(admission={"oversize": "fit", "strip_metadata": True})
    clean = images.png(640, 480)
    status, body = await admit(client, clean)
    assert status == 201
    a = body["attachments"][0]
    assert a["ref"] == "sha256:" + hashlib.sha256(clean).hexdigest()
    assert "normalized" not in a
    assert await read(client, a["ref"]) == clean


async def test_oversize_images_are_fitted_by_default_and_refused_with_reject(
    make_client: MakeClient, tmp_path: Path
) -> None:
    status, body = await admit(await make_client(), photo(4000, 3000))
    assert status == 201
    assert body["attachments"][0]["normalized"]["steps"][-2:] == ["resized", "reencoded"]
    # Another store: a live daemon's store has one policy (docs/configuration.md#one-policy-per-store).
    client = await make_client(data_dir=str(tmp_path / "rejecting"), admission={"oversize": "reject"})
    status, body = await admit(client, photo(4000, 3000))
    assert status == 422
    assert body["error"]["code"] == "IMAGE_DIMENSION_TOO_LARGE"
    assert body["error"]["hint"].endswith("shrink it to at most 2000x1500 and attach it again")


async def test_fit_takes_nothing_past_its_own_bounds(make_client: MakeClient) -> None:
    client = await make_client(admission={"oversize": "fit", "fit_max_pixels": 5_000_000})
    status, body = await admit(client, photo(4000, 3000))
    assert status == 422
    assert body["error"]["code"] == "IMAGE_TOO_MANY_PIXELS"
    assert "12,000,000" in body["error"]["message"]


async def test_fit_takes_no_upload_past_its_byte_bound(make_client: MakeClient) -> None:
    client = await make_client(admission={"oversize": "fit", "fit_max_bytes": 4_000_000})
    noisy = images.png(1000, 1500)  # noise: over 4 MB as PNG, so over both byte bounds
    assert len(noisy) > 4_000_000
    status, body = await admit(client, noisy)
    assert status == 422
    assert body["error"]["code"] == "IMAGE_TOO_LARGE"


async def test_fit_brings_an_image_within_the_byte_limit(make_client: MakeClient) -> None:
    noisy = images.png(1000, 1000)  # noise: about 3 MB as PNG
    client = await make_client(limits={"max_image_bytes": 400_000}, **FIT)
    status, body = await admit(client, noisy)
    assert status == 201, body
    a = body["attachments"][0]
    assert a["bytes"] <= 400_000
    assert a["normalized"]["original"]["bytes"] == len(noisy)


async def test_strip_metadata_removes_gps_and_keeps_the_orientation(make_client: MakeClient) -> None:
    client = await make_client(admission={"strip_metadata": True})
    original = photo(800, 600, orientation=6)
    status, body = await admit(client, original)
    assert status == 201, body
    a = body["attachments"][0]
    assert a["normalized"]["steps"] == ["metadata"]
    assert (a["width"], a["height"]) == (800, 600)  # lossless: the pixels are the upload's
    stored = await read(client, a["ref"])
    exif = exif_of(stored)
    assert not exif.get_ifd(GPS_IFD)
    assert exif.get(ORIENTATION) == 6
    with Image.open(BytesIO(stored)) as kept, Image.open(BytesIO(original)) as sent:
        assert kept.tobytes() == sent.tobytes()


# -- request variants -------------------------------------------------------------------------------------

ROUTES = {
    "small": {"input_modalities": ["text", "image"], "provider": "openai-chat", "max_request_side": 512},
    "many": {
        "input_modalities": ["text", "image"],
        "provider": "anthropic",
        "many_images": {"more_than": 2, "max_side": 300},
    },
}


def render_body(ref: str, route: str = "small", copies: int = 1) -> dict[str, Any]:
    blocks = [{"type": "image", "ref": ref} for _ in range(copies)]
    return {
        "route": route,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, *blocks]}],
    }


def sent_images(body: dict[str, Any]) -> list[bytes]:
    """The images of an openai-chat or anthropic body, decoded."""
    found = []
    for message in body["messages"]:
        for part in message["content"] if isinstance(message["content"], list) else []:
            if part["type"] == "image_url":
                found.append(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))
            elif part["type"] == "image":
                found.append(base64.b64decode(part["source"]["data"]))
    return found


def size_of(data: bytes) -> tuple[int, int]:
    with Image.open(BytesIO(data)) as im:
        return im.size


class CountDerivations:
    """Counts the derivations the pool is asked for. With `together`, the first is held until that many
    requests have looked the variant up (and found none): each of them then either shares the derivation
    in progress or starts one of its own, which the count shows."""

    def __init__(self, store: Store, together: int = 1) -> None:
        self.calls = self.looked = 0
        self.together = together
        self._derive = store.pool.derive
        store.pool.derive = self  # type: ignore[method-assign]
        followed = store.variants.followed

        def looked_up(*args: Any, **kwargs: Any) -> Any:
            self.looked += bool(kwargs.get("count"))  # a lookup on the way to deriving, not a preview's
            return followed(*args, **kwargs)

        store.variants.followed = looked_up  # type: ignore[method-assign]

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        await eventually(lambda: self.looked >= self.together, f"{self.together} requests to look it up")
        return await self._derive(*args, **kwargs)


async def test_a_variant_is_derived_once_under_concurrent_renders_and_reused(make_client: MakeClient) -> None:
    client = await make_client(routes=ROUTES)
    store = client.app[STORE]
    source = images.jpeg(1024, 768)
    ref = (await admit(client, source))[1]["attachments"][0]["ref"]
    counter = CountDerivations(store, together=20)

    answers = await asyncio.gather(*(client.post("/v1/render", json=render_body(ref)) for _ in range(20)))
    bodies = [await a.json() for a in answers]
    assert all(a.status == 200 for a in answers)
    assert counter.calls == 1
    first = sent_images(bodies[0]["body"])
    assert [size_of(d) for d in first] == [(512, 384)]
    assert all(sent_images(b["body"]) == first for b in bodies)  # the same bytes every time
    assert bodies[0]["summary"]["resized"] == 1

    again = await (await client.post("/v1/render", json=render_body(ref))).json()
    assert counter.calls == 1  # cached: no image work the second time
    assert sent_images(again["body"]) == first
    link = await store.index.variant(ref, _spec_key(512))
    assert link is not None
    variant = link.row
    assert variant.ref == "sha256:" + hashlib.sha256(first[0]).hexdigest()


def _spec_key(side: int) -> str:
    spec = variant_spec(Route(max_request_side=side), 1)
    assert spec is not None
    return spec.key


async def test_an_image_within_the_route_limits_is_sent_as_stored(make_client: MakeClient) -> None:
    client = await make_client(routes=ROUTES)
    counter = CountDerivations(client.app[STORE])
    source = images.png(400, 300)
    ref = (await admit(client, source))[1]["attachments"][0]["ref"]
    body = await (await client.post("/v1/render", json=render_body(ref))).json()
    assert sent_images(body["body"]) == [source]
    assert counter.calls == 0


async def test_a_route_with_only_a_byte_limit_gets_variants_within_it(make_client: MakeClient) -> None:
    routes = {
        "bytes": {
            "input_modalities": ["text", "image"],
            "provider": "openai-chat",
            "max_request_bytes": 60_000,
        }
    }
    client = await make_client(routes=routes)
    source = images.jpeg(1200, 900)  # noise: far over 60 kB
    assert len(source) > 60_000
    ref = (await admit(client, source))[1]["attachments"][0]["ref"]
    body = await (await client.post("/v1/render", json=render_body(ref, "bytes"))).json()
    assert body["summary"]["resized"] == 1
    [sent] = sent_images(body["body"])
    assert len(sent) <= 60_000


async def test_the_many_images_rule_applies_past_its_count(make_client: MakeClient) -> None:
    client = await make_client(routes=ROUTES)
    ref = (await admit(client, images.jpeg(640, 480)))[1]["attachments"][0]["ref"]
    two = await (await client.post("/v1/render", json=render_body(ref, "many", copies=2))).json()
    assert [size_of(d) for d in sent_images(two["body"])] == [(640, 480)] * 2
    three = await (await client.post("/v1/render", json=render_body(ref, "many", copies=3))).json()
    assert [size_of(d) for d in sent_images(three["body"])] == [(300, 225)] * 3


async def test_a_damaged_variant_is_never_sent_and_is_derived_again(make_client: MakeClient) -> None:
    client = await make_client(routes=ROUTES)
    store = client.app[STORE]
    ref = (await admit(client, images.jpeg(1024, 768)))[1]["attachments"][0]["ref"]
    first = sent_images((await (await client.post("/v1/render", json=render_body(ref))).json())["body"])
    link = await store.index.variant(ref, _spec_key(512))
    assert link is not None
    variant = link.row
    path = store.local.path(Ref.parse(variant.ref))
    path.chmod(0o644)
    path.write_bytes(images.flip(path.read_bytes(), 100))

    again = await (await client.post("/v1/render", json=render_body(ref))).json()
    assert sent_images(again["body"]) == first  # derived again: the same bytes, verified
    assert await read(client, ref)  # the source is untouched


async def _with_a_variant(make_client: MakeClient) -> tuple[Store, str, ObjectRow]:
    """A daemon's store, a 1024x768 photo admitted there, and the 512 px variant its first render made."""
    client = await make_client(routes=ROUTES)
    store = client.app[STORE]
    ref = (await admit(client, images.jpeg(1024, 768)))[1]["attachments"][0]["ref"]
    await client.post("/v1/render", json=render_body(ref))
    link = await store.index.variant(ref, _spec_key(512))
    assert link is not None
    variant = link.row
    return store, ref, variant


async def test_gc_removes_a_variant_with_its_source(make_client: MakeClient) -> None:
    store, ref, variant = await _with_a_variant(make_client)

    # The variant is not garbage while its source lives, whatever its age.
    plan = await gc.plan(store, grace=0, now=variant.lease_at + 3600)
    assert variant.ref not in {r.ref for r in plan.garbage}
    result = await gc.execute(store, plan)
    assert set(result.collected) == {ref, variant.ref}
    assert await store.index.get(variant.ref) is None
    for r in (ref, variant.ref):
        assert not store.local.path(Ref.parse(r)).exists()


async def test_a_variant_of_a_held_source_survives_gc(make_client: MakeClient) -> None:
    client = await make_client(routes=ROUTES)
    store = client.app[STORE]
    assert (await client.put("/v1/sessions/s1", json={"route": "small"})).status in (200, 201)
    status, body = await admit(client, images.jpeg(1024, 768), session="s1")
    assert status == 201
    ref = body["attachments"][0]["ref"]
    await client.post("/v1/render", json=render_body(ref))
    link = await store.index.variant(ref, _spec_key(512))
    assert link is not None
    variant = link.row
    plan = await gc.plan(store, grace=0, now=variant.lease_at + 3600)
    await gc.execute(store, plan)
    assert await store.index.variant(ref, _spec_key(512)) == link


async def test_a_shared_variant_collected_between_its_write_and_its_link_is_written_again(
    make_client: MakeClient,
) -> None:
    """Two sources with the same pixels share one variant. gc collecting the first source (and with it the
    variant) while a render of the second has written the variant but not linked it: the render writes it
    again and succeeds."""
    client = await make_client(routes=ROUTES)
    store = client.app[STORE]
    base = images.jpeg(1024, 768)
    commented = images.jpeg_insert(base, 2, images.jpeg_segment(0xFE, b"a comment"))
    first = (await admit(client, base))[1]["attachments"][0]["ref"]
    second = (await admit(client, commented))[1]["attachments"][0]["ref"]
    await client.post("/v1/render", json=render_body(first))
    link = await store.index.variant(first, _spec_key(512))
    assert link is not None
    shared = link.row
    publish = store.index.publish_variant
    collected: list[str] = []

    async def gc_lands_first(*args: Any) -> bool:
        if not collected:  # once: the sweep of the first source, between the write and the link
            plan = await gc.plan(store, grace=0, now=shared.lease_at + 3600)
            plan.garbage[:] = [row for row in plan.garbage if row.ref == first]
            collected.extend((await gc.execute(store, plan)).collected)
        return await publish(*args)

    store.index.publish_variant = gc_lands_first  # type: ignore[method-assign]
    answer = await client.post("/v1/render", json=render_body(second))
    assert answer.status == 200
    assert collected == [first, shared.ref]  # the variant went with the first source...
    assert (await answer.json())["summary"]["resized"] == 1
    link = await store.index.variant(second, _spec_key(512))
    assert link is not None
    linked = link.row
    assert linked.ref == shared.ref  # ...and was written again for the second
    assert await read(client, shared.ref)


async def test_a_variant_that_cannot_be_made_leaves_the_image_out_as_too_large(
    make_client: MakeClient,
) -> None:
    client = await make_client(routes=ROUTES)
    store = client.app[STORE]
    ref = (await admit(client, images.jpeg(1600, 1200)))[1]["attachments"][0]["ref"]
    store.pool.timeout = 0.001  # every derivation runs past its time bound
    body = await (await client.post("/v1/render", json=render_body(ref))).json()
    assert body["summary"]["included"] == 0
    assert body["summary"]["omitted"] == 1
    assert body["summary"]["unavailable"] == 0
    text = body["body"]["messages"][0]["content"][1]["text"]
    assert text.startswith("[image omitted to keep the request within its image limits")

    counter = CountDerivations(store)  # the failure is remembered: the next render does no image work
    again = await (await client.post("/v1/render", json=render_body(ref))).json()
    assert again["summary"]["omitted"] == 1
    assert counter.calls == 0


async def test_a_variant_renewed_after_the_cutoff_outlives_its_source(make_client: MakeClient) -> None:
    store, ref, variant = await _with_a_variant(make_client)
    cutoff = variant.lease_at + 10
    await store.index.renew([variant.ref], cutoff + 5)  # derived again for another source meanwhile
    result = await gc.execute(store, await gc.plan(store, grace=0, now=cutoff))
    assert result.collected == [ref]
    assert await store.index.get(variant.ref) is not None  # an ordinary unheld object now, for a later gc


async def test_a_render_alone_derives_within_its_tenants_cap_and_never_meets_it(
    make_client: MakeClient,
) -> None:
    client = await make_client(routes=ROUTES, admission={"max_derivations_per_tenant": 2})
    store = client.app[STORE]
    refs = [
        (await admit(client, images.jpeg(1024, 768, seed=n)))[1]["attachments"][0]["ref"] for n in range(5)
    ]
    started = running = most = 0
    derive = store.pool.derive

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal started, running, most
        started += 1
        running += 1
        most = max(most, running)
        try:
            # Held until another runs beside it (or none is left to start): what the cap lets run shows.
            await eventually(lambda: running >= 2 or started == len(refs), "a second derivation at once")
            return await derive(*args, **kwargs)
        finally:
            running -= 1

    store.pool.derive = counted  # type: ignore[method-assign]
    blocks = [{"type": "image", "ref": ref} for ref in refs]
    body = {"route": "small", "messages": [{"role": "user", "content": blocks}]}
    answer = await client.post("/v1/render", json=body)
    assert answer.status == 200, await answer.text()
    rendered = await answer.json()
    assert rendered["summary"]["resized"] == 5
    assert most == 2  # two at a time: the tenant's cap, never a 503 of its own making
