"""A JPEG padded before its frame header with empty segments or fill bytes by the hundred thousand: under
the byte limit, admitted, and then walked in Python on the event loop by the header probe of every read."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import aiohttp
import msgspec

from attachstore.config import Config
from attachstore.service import Store
from tests.support import images
from tests.support.http import b64
from tests.support.store import plant

MiB = 1 << 20
READERS = 20


async def _plant(data_dir: str, data: bytes, tenant: str) -> str:
    """What a daemon before the bound admitted: published on the live daemon's data dir, past the gate."""
    store = await Store.open(msgspec.convert({"data_dir": data_dir}, Config))
    try:
        return str(await plant(store, data, "image/jpeg", 16, 16, tenant))
    finally:
        await store.close()


async def _admit(http: aiohttp.ClientSession, daemon: Any, tenant: str, data: bytes) -> tuple[int, Any]:
    body = json.dumps({"source": "user", "images": [{"data": b64(data)}]}).encode()
    headers = {**daemon.headers(tenant), "Content-Type": "application/json"}
    async with http.post(f"{daemon.url}/v1/attachments", data=io.BytesIO(body), headers=headers) as r:
        return r.status, await r.json()


async def test_padded_jpegs_are_refused_and_those_admitted_before_are_read_off_the_loop(
    start_daemon: Any,
) -> None:
    # Room for every reader's answer at once: this test is about the loop, not the per-tenant send budget.
    daemon = start_daemon(http={"max_sending_bytes": 2 * READERS * 4 * MiB})
    segments = images.jpeg_padded(images.jpeg(16, 16), segments=917_000)  # 3.67 MB, under 3.5 MiB
    fill = images.jpeg_padded(images.jpeg(16, 16), fill=3_600_000)
    async with aiohttp.ClientSession() as http:
        for padded in (segments, fill):
            status, answer = await _admit(http, daemon, "mallory", padded)
            assert status == 422, answer
            assert answer["error"]["code"] == "INVALID_IMAGE"
            assert "1,024 markers and fill bytes" in answer["error"]["message"]

        # Admitted before the gate refused such files: still readable (reads never re-apply admission
        # limits), by every one of many readers at once, while the event loop walks no more than the bound:
        # the full walk runs in a thread, once for the object.
        ref = await _plant(str(daemon.data_dir), segments, "mallory")

        async def read(tenant: str, ref: str) -> tuple[int, bytes]:
            async with http.get(f"{daemon.url}/v1/attachments/{ref}", headers=daemon.headers(tenant)) as r:
                return r.status, await r.read()

        answers = await asyncio.gather(*(read("mallory", ref) for _ in range(READERS)))
        assert all(answer == (200, segments) for answer in answers)
        assert daemon.metric("attachstore_header_probes_deferred_total") == 1
        assert daemon.metric("attachstore_reads_total", result="ok") == READERS

        photo = images.jpeg(64, 48)
        status, answer = await _admit(http, daemon, "alice", photo)
        assert status == 201, answer
        assert await read("alice", answer["attachments"][0]["ref"]) == (200, photo)
        assert (await read("alice", ref))[0] == 404  # and mallory's object stays mallory's
    # Two admissions of 4.9 MB of base64 and 20 answers of 3.67 MB in flight, over a daemon of some 60 MB.
    assert daemon.peak_rss() < 60 * MiB + READERS * 2 * len(segments) + 40 * MiB
