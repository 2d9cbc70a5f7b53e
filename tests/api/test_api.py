"""The HTTP API through the real app, on a temporary data dir."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from attachstore.api.common import STORE
from attachstore.refs import Ref
from attachstore.storage import LocalBlobStore
from tests.conftest import MakeClient
from tests.support.faults import Filling, flip_byte
from tests.support.http import Client, admit, admit_ok, b64, error_of, object_path, post_json
from tests.support.images import apng, gif, gif_animated, jpeg, png, webp, webp_animated

# The largest noise image of each format that stays under the default 3.5 MiB (noise is worst-case bytes).
FORMATS = [
    ("image/png", png, (1000, 1000)),
    ("image/jpeg", jpeg, (2000, 1500)),
    ("image/gif", gif, (1500, 1000)),
    ("image/webp", webp, (2000, 1500)),
]


@pytest.mark.parametrize(("media_type", "make", "large"), FORMATS)
@pytest.mark.parametrize("size", ["tiny", "large"])
async def test_every_format_round_trips(
    client: Client, media_type: str, make: Any, large: tuple[int, int], size: str
) -> None:
    width, height = (1, 1) if size == "tiny" else large
    image = make(width, height)
    [a] = await admit_ok(client, image, media_type=media_type, name="dir/sub/shot.img")
    assert a == {
        "ref": str(Ref.of("sha256", image)),
        "media_type": media_type,
        "bytes": len(image),
        "width": width,
        "height": height,
        "frames": 1,
        "name": "shot.img",
    }
    response = await client.get(f"/v1/attachments/{a['ref']}")
    assert response.status == 200
    assert await response.read() == image
    assert response.headers["Content-Type"] == media_type


@pytest.mark.parametrize(
    ("make", "media_type"),
    [(gif_animated, "image/gif"), (webp_animated, "image/webp"), (apng, "image/png")],
)
async def test_animations_round_trip_with_their_frame_count(
    client: Client, make: Any, media_type: str
) -> None:
    image = make(64, 48, 5)
    [a] = await admit_ok(client, image)
    assert (a["media_type"], a["width"], a["height"], a["frames"]) == (media_type, 64, 48, 5)
    assert await (await client.get(f"/v1/attachments/{a['ref']}")).read() == image


async def test_read_headers_head_and_conditional_get(client: Client) -> None:
    image = png(3, 2)
    [a] = await admit_ok(client, image)
    url = f"/v1/attachments/{a['ref']}"
    response = await client.get(url)
    headers = response.headers
    assert headers["ETag"] == f'"{a["ref"]}"'
    assert headers["Cache-Control"] == "private, max-age=31536000, immutable"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert headers["Content-Length"] == str(len(image))

    head = await client.head(url)
    assert head.status == 200
    assert head.headers["Content-Length"] == str(len(image))
    assert await head.read() == b""

    cached = await client.get(url, headers={"If-None-Match": headers["ETag"]})
    assert cached.status == 304
    assert await cached.read() == b""
    other = await client.get(url, headers={"If-None-Match": '"sha256:' + "0" * 64 + '"'})
    assert other.status == 200

    meta = await client.get(f"{url}/meta")
    assert await meta.json() == a


async def test_multipart_batch_keeps_input_order_and_names(client: Client) -> None:
    first, second = png(5, 5), jpeg(8, 6)
    form = aiohttp.FormData(quote_fields=False)
    form.add_field("source", "user")
    form.add_field("a", first, filename="photos/2026/first.png", content_type="image/png")
    form.add_field("b", second, filename="second.bin", content_type="application/octet-stream")
    response = await client.post("/v1/attachments", data=form)
    assert response.status == 201, await response.text()
    got = (await response.json())["attachments"]
    assert [g["ref"] for g in got] == [str(Ref.of("sha256", first)), str(Ref.of("sha256", second))]
    assert [g["name"] for g in got] == ["first.png", "second.bin"]
    assert got[1]["media_type"] == "image/jpeg"


async def test_multipart_declared_type_is_checked(client: Client) -> None:
    form = aiohttp.FormData()
    form.add_field("source", "user")
    form.add_field("a", png(5, 5), filename="x.jpg", content_type="image/jpeg")
    response = await client.post("/v1/attachments", data=form)
    assert response.status == 422
    assert (await error_of(response))["code"] == "IMAGE_TYPE_MISMATCH"


async def test_multipart_oversize_part_is_rejected_by_size(make_client: MakeClient) -> None:
    client = await make_client(limits={"max_image_bytes": 1000}, admission={"oversize": "reject"})
    form = aiohttp.FormData()
    form.add_field("source", "user")
    form.add_field("a", os.urandom(5000), filename="big.png", content_type="image/png")
    response = await client.post("/v1/attachments", data=form)
    error = await error_of(response)
    assert (response.status, error["code"], error["index"]) == (422, "IMAGE_TOO_LARGE", 0)
    assert "1,000 bytes and this image is 5,000 bytes" in error["hint"]


async def test_dedup_gives_one_ref_and_one_file(client: Client, data_dir: Path) -> None:
    image = png(40, 30)
    [a] = await admit_ok(client, image)
    [b] = await admit_ok(client, image)
    assert a["ref"] == b["ref"]
    files = [p for p in (data_dir / "objects").rglob("*") if p.is_file()]
    assert files == [object_path(data_dir, a["ref"])]
    assert oct(files[0].stat().st_mode & 0o777) == "0o444"


async def test_batch_is_all_or_nothing(client: Client) -> None:
    good = png(10, 10)
    response = await admit(client, good, png(10, 10)[:-20])
    error = await error_of(response)
    assert (response.status, error["code"], error["index"]) == (422, "INVALID_IMAGE", 1)
    assert (await client.get(f"/v1/attachments/{Ref.of('sha256', good)}")).status == 404


async def test_first_failure_in_input_order_decides(client: Client) -> None:
    # Image 0 needs a full decode to fail; image 1 fails a cheap check. Input order wins.
    response = await admit(client, png(10, 10)[:-20], b"GIF89a" + b"\0" * 10, media_type="image/png")
    error = await error_of(response)
    assert (error["code"], error["index"]) == ("INVALID_IMAGE", 0)


async def test_a_flipped_byte_is_never_served_and_heals(client: Client, data_dir: Path) -> None:
    image = png(50, 50)
    [a] = await admit_ok(client, image)
    path = object_path(data_dir, a["ref"])
    flip_byte(path, len(image) // 2)
    response = await client.get(f"/v1/attachments/{a['ref']}")
    assert response.status == 500
    error = await error_of(response)
    assert error["code"] == "ATTACHMENT_CORRUPT"
    assert error["hint"] == (
        "admitting the same image again heals it (the same bytes give the same ref); "
        "`attachstore audit --repair` quarantines every damaged object of the store"
    )
    assert not path.exists()
    assert len(os.listdir(data_dir / "quarantine")) == 1
    # Still corrupt until healed, without touching a file; and still told how to heal it.
    again = await client.get(f"/v1/attachments/{a['ref']}")
    assert (again.status, (await error_of(again))["hint"]) == (500, error["hint"])
    assert (await client.get(f"/v1/attachments/{a['ref']}/meta")).status == 500
    await admit_ok(client, image)
    healed = await client.get(f"/v1/attachments/{a['ref']}")
    assert healed.status == 200
    assert await healed.read() == image


async def test_a_damaged_object_is_healed_by_admission_without_a_read(client: Client, data_dir: Path) -> None:
    image = jpeg(30, 20)
    [a] = await admit_ok(client, image)
    flip_byte(object_path(data_dir, a["ref"]), 100)
    await admit_ok(client, image)
    assert await (await client.get(f"/v1/attachments/{a['ref']}")).read() == image


async def test_a_missing_object_is_reported_and_heals(client: Client, data_dir: Path) -> None:
    image = gif(20, 20)
    [a] = await admit_ok(client, image)
    object_path(data_dir, a["ref"]).unlink()
    response = await client.get(f"/v1/attachments/{a['ref']}")
    assert response.status == 500
    error = await error_of(response)
    assert error["code"] == "ATTACHMENT_MISSING"
    assert error["hint"].startswith("admitting the same image again heals it")
    await admit_ok(client, image)
    assert await (await client.get(f"/v1/attachments/{a['ref']}")).read() == image


@pytest.mark.parametrize(
    "text",
    [
        "sha256:..%2F..%2Fetc%2Fpasswd",
        "sha256:../../etc/passwd",
        "sha256:abc123",
        "sha256:" + "A" * 64,
        "md5:" + "a" * 64,
        "sha256:" + "a" * 64 + "%00",
        "sha256:" + "a" * 64 + "%0A",  # no route's pattern matched a newline: it was the generic 404
        "%0Asha256:" + "a" * 64,
        "sha256:" + "a" * 32 + "%0D%0A" + "a" * 32,
        "",  # no ref at all: /v1/attachments/ and /v1/attachments//meta
    ],
)
async def test_malformed_refs_are_refused_before_any_file_access(
    client: Client, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    touched: list[str] = []
    real = LocalBlobStore.path
    monkeypatch.setattr(LocalBlobStore, "path", lambda self, ref: touched.append(str(ref)) or real(self, ref))
    for suffix in ("", "/meta"):
        for method in ("GET", "HEAD"):
            url = URL(f"/v1/attachments/{text}{suffix}", encoded=True)
            response = await client.request(method, url)
            assert response.status == 400, (text, suffix, method)
            if method == "GET":
                assert (await error_of(response))["code"] == "INVALID_ATTACHMENT_REF"
    assert touched == []


@pytest.mark.parametrize("text", ["sha256:" + "a" * 64 + "\n", "sha256:" + "a" * 200, "x" * 5000])
async def test_malformed_refs_in_bodies_are_invalid_refs(client: Client, text: str) -> None:
    assert (await client.put("/v1/sessions/s", json={})).status == 201
    held = await client.post("/v1/sessions/s/holds", json={"refs": [text]})
    # A string longer than a ref was INVALID_REQUEST, where every malformed ref is INVALID_ATTACHMENT_REF.
    assert (held.status, (await error_of(held))["code"]) == (400, "INVALID_ATTACHMENT_REF")
    image = {"role": "user", "content": [{"type": "image", "ref": text}]}
    rendered = await client.post("/v1/render", json={"provider": "anthropic", "messages": [image]})
    assert (rendered.status, (await error_of(rendered))["code"]) == (400, "INVALID_ATTACHMENT_REF")


async def test_unknown_ref_is_not_found(client: Client) -> None:
    response = await client.get("/v1/attachments/sha256:" + "0" * 64)
    assert response.status == 404
    assert (await error_of(response))["code"] == "ATTACHMENT_NOT_FOUND"


async def test_tightened_limits_leave_old_objects_readable(make_client: MakeClient) -> None:
    image = png(300, 200)
    client = await make_client()
    [a] = await admit_ok(client, image)
    await client.close()
    strict = await make_client(limits={"max_side": 10, "max_image_bytes": 100, "max_pixels": 50})
    response = await strict.get(f"/v1/attachments/{a['ref']}")
    assert response.status == 200
    assert await response.read() == image
    assert (await strict.get(f"/v1/attachments/{a['ref']}/meta")).status == 200


async def test_blake3_when_configured(make_client: MakeClient) -> None:
    client = await make_client(hash="blake3")
    image = png(4, 4)
    [a] = await admit_ok(client, image)
    assert a["ref"] == str(Ref.of("blake3", image))
    assert await (await client.get(f"/v1/attachments/{a['ref']}")).read() == image


async def test_a_pathologically_slow_decode_is_cut_off(make_client: MakeClient) -> None:
    client = await make_client(admission={"decode_timeout": "1ms"})
    response = await admit(client, webp(2000, 1500))
    error = await error_of(response)
    assert (response.status, error["code"]) == (422, "INVALID_IMAGE")
    assert "longer than" in error["message"]


async def test_the_pool_recovers_after_cutting_off_a_worker(make_client: MakeClient) -> None:
    client = await make_client(admission={"decode_timeout": "1ms"})
    assert (await admit(client, webp(2000, 1500))).status == 422
    client.app[STORE].pool.timeout = 30.0
    await admit_ok(client, png(2, 2))


# -- the error envelope ----------------------------------------------------------------------------------


async def test_malformed_json(client: Client) -> None:
    response = await client.post(
        "/v1/attachments", data=b"{nope", headers={"Content-Type": "application/json"}
    )
    error = await error_of(response)
    assert (response.status, error["code"]) == (400, "INVALID_REQUEST")
    assert "malformed JSON" in error["message"]


async def test_unknown_field_is_named(client: Client) -> None:
    response = await client.post("/v1/attachments", json={"source": "user", "images": [], "colour": 1})
    error = await error_of(response)
    assert (response.status, error["code"]) == (400, "INVALID_REQUEST")
    assert "colour" in error["message"]


async def test_wrong_type_names_the_json_path(client: Client) -> None:
    response = await client.post("/v1/attachments", json={"source": "user", "images": [{"data": 5}]})
    error = await error_of(response)
    assert (response.status, error["code"]) == (400, "INVALID_REQUEST")
    assert "$.images[0].data" in error["message"]


async def test_unknown_source(client: Client) -> None:
    response = await client.post("/v1/attachments", json={"source": "robot", "images": []})
    assert (await error_of(response))["code"] == "INVALID_REQUEST"


async def test_empty_batch(client: Client) -> None:
    response = await client.post("/v1/attachments", json={"source": "user", "images": []})
    assert response.status == 400


async def test_non_canonical_base64(client: Client) -> None:
    body = {"source": "user", "images": [{"data": b64(png(2, 2)).rstrip("=") + "\n"}]}
    response = await client.post("/v1/attachments", json=body)
    error = await error_of(response)
    assert (response.status, error["code"], error["index"]) == (400, "INVALID_IMAGE_BASE64", 0)


async def test_wrong_content_type(client: Client) -> None:
    response = await client.post("/v1/attachments", data=b"x", headers={"Content-Type": "text/plain"})
    assert (response.status, (await error_of(response))["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")


async def test_a_20_mib_body_over_the_cap_is_refused(make_client: MakeClient) -> None:
    client = await make_client(http={"max_body_bytes": 8 * 1024 * 1024})
    body = {"source": "user", "images": [{"data": "A" * (20 * 1024 * 1024)}]}
    response = await post_json(client, "/v1/attachments", body)
    assert (response.status, (await error_of(response))["code"]) == (413, "PAYLOAD_TOO_LARGE")


async def test_an_image_past_fits_source_bound_under_the_default_cap_is_too_large(client: Client) -> None:
    body = {"source": "user", "images": [{"data": "A" * (28 * 1024 * 1024)}]}  # 21 MiB decoded
    response = await post_json(client, "/v1/attachments", body)
    error = await error_of(response)
    assert (response.status, error["code"]) == (422, "IMAGE_TOO_LARGE")
    assert "the limit is 20,971,520 bytes" in error["hint"]


async def test_chunked_body_over_the_cap_is_refused(make_client: MakeClient) -> None:
    client = await make_client(http={"max_body_bytes": 1024 * 1024})

    async def chunks() -> Any:
        for _ in range(40):
            yield b"A" * 65536

    response = await client.post(
        "/v1/attachments", data=chunks(), headers={"Content-Type": "application/json"}
    )
    assert (response.status, (await error_of(response))["code"]) == (413, "PAYLOAD_TOO_LARGE")


async def test_unknown_path_and_method(client: Client) -> None:
    missing = await client.get("/v2/nothing")
    assert (missing.status, (await error_of(missing))["code"]) == (404, "NOT_FOUND")
    wrong = await client.delete("/v1/attachments")
    assert (wrong.status, (await error_of(wrong))["code"]) == (405, "METHOD_NOT_ALLOWED")


async def test_health_and_readiness(client: Client, data_dir: Path) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    # Staging that cannot take a file (here: replaced by a plain file) means not ready.
    (data_dir / "tmp").rmdir()
    (data_dir / "tmp").write_bytes(b"")
    not_ready = await client.get("/readyz")
    assert (not_ready.status, (await error_of(not_ready))["code"]) == (503, "STORAGE_UNAVAILABLE")


async def test_not_ready_when_one_admission_would_not_fit(make_client: MakeClient) -> None:
    """A disk too full for the largest batch the limits admit: a load balancer should send admissions
    elsewhere, not to a daemon that answers each of them 507."""
    disk = Filling(free=3 << 20)
    client = await make_client(file_ops=disk, limits={"max_batch_bytes": 4 << 20})
    disk.log.clear()  # the layout's fsyncs at start-up
    not_ready = await client.get("/readyz")
    assert (not_ready.status, (await error_of(not_ready))["code"]) == (503, "STORAGE_UNAVAILABLE")
    assert disk.log == []  # refused before anything was written
    disk.free = 4 << 20
    assert (await client.get("/readyz")).status == 200
    assert disk.log == ["open", "write", "fsync", "fchmod", "close", "unlink"]
