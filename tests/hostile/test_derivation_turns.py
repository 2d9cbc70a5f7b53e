"""Derivations (previews, and the variants a render sends on a route with per-request limits) of one tenant
queued in the decode pool: they used to wait in one turn shared by every tenant, first come first served, so
that another tenant's preview of a small image waited for all of them. Now each runs in its requester's turn,
and one tenant has at most `[admission] max_derivations_per_tenant` in progress and queued.

Mallory's sources are scan-bomb JPEGs (some 50 s of decoding each), planted past the gate as an older gate
would have admitted them. No decode here ends by the clock: the test ends each bomb by crashing its worker,
so what decoded before alice's derivations is the same however slow the machine, and counted exactly."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import aiohttp
from PIL import Image

from tests.support import images
from tests.support.decoders import (
    answered,
    crash_decoder,
    crash_each,
    decodes,
    planted,
    polled,
    preview,
    queue,
)
from tests.support.http import b64

BOMB_SIDE = 2000
SIZES = (64, 128)
ROUTES = {
    'routes."small"': {
        "input_modalities": ["text", "image"],
        "provider": "openai-chat",
        "max_request_side": 64,
    }
}
SLOW = {"decode_workers": 1, "decode_timeout": "600s", "request_decode_timeout": "3600s"}


async def _bombs(daemon: Any, count: int) -> list[str]:
    bombs = [images.jpeg_scan_bomb(20_000 + n, BOMB_SIDE) for n in range(count)]
    return await planted(daemon, "mallory", [(b, "image/jpeg", BOMB_SIDE, BOMB_SIDE) for b in bombs])


async def _render(http: aiohttp.ClientSession, daemon: Any, tenant: str, ref: str) -> tuple[int, Any]:
    body = {"route": "small", "messages": [{"role": "user", "content": [{"type": "image", "ref": ref}]}]}
    headers = {**daemon.headers(tenant), "Content-Type": "application/json"}
    async with http.post(f"{daemon.url}/v1/render", data=json.dumps(body).encode(), headers=headers) as r:
        return r.status, await r.json()


async def _admit(http: aiohttp.ClientSession, daemon: Any, tenant: str, data: bytes) -> str:
    body = json.dumps({"source": "user", "images": [{"data": b64(data)}]}).encode()
    headers = {**daemon.headers(tenant), "Content-Type": "application/json"}
    async with http.post(f"{daemon.url}/v1/attachments", data=io.BytesIO(body), headers=headers) as r:
        answer = await r.json()
        assert r.status == 201, answer
        return str(answer["attachments"][0]["ref"])


def _side(data: bytes) -> int:
    with Image.open(io.BytesIO(data)) as im:
        return max(im.size)


async def test_another_tenants_derivations_wait_for_no_queue_of_mallorys(start_daemon: Any) -> None:
    daemon = start_daemon(admission=SLOW, **ROUTES)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
        photo = await _admit(http, daemon, "alice", images.png(300, 200))
        bombs = await _bombs(daemon, 3)
        jobs = [(ref, size) for ref in bombs for size in SIZES]  # six derivations, each a bomb
        mallory = [asyncio.ensure_future(preview(http, daemon, "mallory", r, s)) for r, s in jobs]
        await polled(lambda: queue(daemon) == (1, len(jobs) - 1), "mallory's derivations to queue")

        hers = asyncio.ensure_future(preview(http, daemon, "alice", photo, 64))
        await polled(lambda: queue(daemon) == (1, len(jobs)), "alice's preview to queue")
        crash_decoder(daemon.proc.pid)  # the bomb decoding ends; her preview waits for no other of his
        status, data, _ = await answered(hers, "alice's preview was not answered while mallory's waited")
        assert (status, _side(data)) == (200, 64)
        # One bomb ended, alice's preview derived: the other five of mallory's still to decode.
        assert (decodes(daemon, result="crashed"), decodes(daemon, result="passed")) == (1, 2)
        await polled(lambda: queue(daemon) == (1, len(jobs) - 2), "mallory's next bomb to start")

        render = asyncio.ensure_future(_render(http, daemon, "alice", photo))
        await polled(lambda: queue(daemon) == (1, len(jobs) - 1), "alice's variant to queue")
        crash_decoder(daemon.proc.pid)
        status, answer = await answered(render, "alice's render was not answered while mallory's waited")
        assert status == 200, answer
        assert answer["summary"]["resized"] == 1  # sent as the route's variant, derived in her turn
        assert (decodes(daemon, result="crashed"), decodes(daemon, result="passed")) == (2, 3)
        # And mallory's third bomb decoding, three still in his turn (the third starts once it has read its
        # source, a moment after alice's variant gave the worker up).
        await polled(lambda: queue(daemon) == (1, len(jobs) - 3), "mallory's third bomb to start")

        await crash_each(daemon, 2, len(jobs))
        answers = await asyncio.gather(*mallory)
    assert [status for status, _, _ in answers] == [422] * len(jobs)
    assert decodes(daemon) == len(jobs) + 3
    daemon.assert_alice_is_served()


async def test_one_tenant_has_at_most_its_cap_of_derivations_in_flight_and_queued(start_daemon: Any) -> None:
    daemon = start_daemon(admission={**SLOW, "max_derivations_per_tenant": 2}, **ROUTES)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
        photo = await _admit(http, daemon, "alice", images.png(300, 200))
        bombs = await _bombs(daemon, 2)
        mallory = [asyncio.ensure_future(preview(http, daemon, "mallory", r, 64)) for r in bombs]
        await polled(lambda: queue(daemon) == (1, 1), "mallory's two derivations")

        # A third is refused at once, with a time to retry after; asking again for one in progress is not
        # another derivation, and waits for it.
        status, data, retry = await preview(http, daemon, "mallory", bombs[0], 128)
        assert (status, retry) == (503, "1")
        error = json.loads(data)["error"]
        assert error["code"] == "SERVER_BUSY"
        assert "derivations of this tenant" in error["message"]
        # So is a render that would derive a variant: a 503 to retry, not its image left out as damaged.
        status, answer = await _render(http, daemon, "mallory", bombs[0])
        assert (status, answer["error"]["code"]) == (503, "SERVER_BUSY"), answer
        assert daemon.metric("attachstore_variants_total", result="busy") == 2
        again = asyncio.ensure_future(preview(http, daemon, "mallory", bombs[1], 64))

        # Alice's own cap is untouched: hers queues in her turn, and is derived after the bomb running.
        hers = asyncio.ensure_future(preview(http, daemon, "alice", photo, 64))
        await polled(lambda: queue(daemon) == (1, 2), "alice's preview to queue")
        crash_decoder(daemon.proc.pid)
        status, data, _ = await answered(hers, "alice's preview was not answered")
        assert (status, _side(data)) == (200, 64)

        await crash_each(daemon, 1, 2)
        answers = await asyncio.gather(*mallory, again)
    assert [status for status, _, _ in answers] == [422] * 3
    assert decodes(daemon) == 2 + 2  # alice's admission and preview, and the two bombs: no third
    daemon.assert_alice_is_served()
