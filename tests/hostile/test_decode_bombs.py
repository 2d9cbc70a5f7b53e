"""Scan-bomb JPEGs: a few hundred KB each, valid, and some 50 s of decoding, so that only a time bound, a
cancellation or the crash of their worker stops them. One request of several used to keep the decoders for
all of them, after its verdict was known or its client had gone, while another tenant's small admission
waited behind it."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import aiohttp

from tests.support import images
from tests.support.decoders import answered, crash_decoder, crash_each, decodes, polled, queue
from tests.support.http import b64

BOMB_SCANS = 20_000
BOMBS = 6
MiB = 1 << 20
# Six bombs in base64 are 2.4 MB of body: the daemon (some 60-80 MB here) holds a few copies at most.
PEAK_RSS = 160 * MiB
VISION = {"routes.vision": {"input_modalities": ["text", "image"]}}


def _bombs() -> list[bytes]:
    return [images.jpeg_scan_bomb(BOMB_SCANS + n) for n in range(BOMBS)]


def _body(source: str, batch: list[bytes], route: str | None = None) -> bytes:
    body: dict[str, Any] = {"source": source, "images": [{"data": b64(b)} for b in batch]}
    if route is not None:
        body["route"] = route
    return json.dumps(body).encode()


async def _admit(daemon: Any, tenant: str, body: bytes) -> tuple[int, Any]:
    headers = {**daemon.headers(tenant), "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{daemon.url}/v1/attachments", data=io.BytesIO(body), headers=headers) as r,
    ):
        return r.status, await r.json()


async def _alice_is_served(daemon: Any) -> None:
    photo = images.png(32, 24)
    status, answer = await _admit(daemon, "alice", _body("user", [photo]))
    assert status == 201, answer
    headers = daemon.headers("alice")
    ref = answer["attachments"][0]["ref"]
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{daemon.url}/v1/attachments/{ref}", headers=headers) as r,
    ):
        assert (r.status, await r.read()) == (200, photo)


async def test_a_client_that_disconnects_cancels_itsdecodes(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"decode_timeout": "30s"})
    body = _body("user", _bombs())
    host, port = daemon.url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /v1/attachments HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Authorization: {daemon.headers('mallory')['Authorization']}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    await polled(lambda: queue(daemon)[0] == 1, "the first bomb to decode")
    writer.close()  # mallory leaves while the first bomb decodes
    await writer.wait_closed()

    await polled(
        lambda: daemon.metric("attachstore_admissions_total", result="cancelled") == 1,
        "the admission to be cancelled",
    )
    assert daemon.metric("attachstore_decodes_running") == 0
    assert daemon.metric("attachstore_decodes_waiting") == 0
    assert decodes(daemon, result="cancelled") == 1
    assert decodes(daemon) == 1  # its worker killed, and none of the other five bombs started
    await _alice_is_served(daemon)
    assert decodes(daemon) == 2
    lines = [json.loads(line) for line in daemon.log.read_text().splitlines() if line.startswith("{")]
    [gone] = [line for line in lines if line.get("tenant") == "mallory" and line.get("msg") == "request"]
    assert gone["status"] == 499  # logged as the client that went away, not as a server error
    assert daemon.peak_rss() < PEAK_RSS


async def test_a_batch_whose_first_image_fails_decodes_none_of_the_rest(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"decode_timeout": "2s"})
    for first in (images.truncate(images.png(16, 12), 60), images.jpeg_scan_bomb(BOMB_SCANS - 1)):
        before = decodes(daemon)
        status, answer = await _admit(daemon, "mallory", _body("user", [first, *_bombs()]))
        assert status == 422, answer
        assert (answer["error"]["code"], answer["error"]["index"]) == ("INVALID_IMAGE", 0)
        assert decodes(daemon) == before + 1  # the verdict was known: its siblings never reached a worker
    await _alice_is_served(daemon)
    assert daemon.peak_rss() < PEAK_RSS


async def test_a_request_decodes_no_longer_than_its_budget(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"decode_timeout": "2s", "request_decode_timeout": "5s"}, **VISION)
    status, answer = await _admit(daemon, "mallory", _body("tool", _bombs(), route="vision"))
    assert status == 200, answer
    assert answer["degraded"]
    assert [d["code"] for d in answer["diagnostics"]] == ["INVALID_IMAGE"] * BOMBS
    assert "used up their 5 s of decoding" in answer["diagnostics"][-1]["message"]
    # 2 s, 2 s and the last second: three decodes, stopped by the clock; the other three never started.
    assert decodes(daemon, result="timeout") == 3
    assert decodes(daemon) == 3
    await _alice_is_served(daemon)
    assert daemon.peak_rss() < PEAK_RSS


async def test_one_tenants_queue_of_decodes_does_not_hold_up_anothers(start_daemon: Any) -> None:
    # No decode here ends by the clock: the test ends each bomb by crashing its worker. What decoded before
    # alice's image is then the same however slow the machine, and counted exactly.
    daemon = start_daemon(admission={"decode_timeout": "600s", "request_decode_timeout": "3600s"}, **VISION)
    mallory = asyncio.ensure_future(_admit(daemon, "mallory", _body("tool", _bombs(), route="vision")))
    await polled(lambda: queue(daemon) == (1, BOMBS - 1), "one bomb decoding, the others waiting")
    alice = asyncio.ensure_future(_alice_is_served(daemon))
    await polled(lambda: queue(daemon)[1] == BOMBS, "hers, behind five bombs")
    crash_decoder(daemon.proc.pid)  # the bomb decoding ends
    # Once that bomb ended, her image waits for none.
    await answered(alice, "alice's admission, once the bomb decoding ended")
    # Alice's image went to the worker as soon as the bomb decoding then ended, not after the five bombs
    # queued before it: two decodes in all, and the five bombs still to decode.
    assert (decodes(daemon, result="crashed"), decodes(daemon, result="passed")) == (1, 1)
    assert decodes(daemon) == 2
    await polled(lambda: queue(daemon)[0] == 1, "the next bomb to decode")
    assert daemon.metric("attachstore_decodes_waiting") == BOMBS - 2

    await crash_each(daemon, 1, BOMBS)  # mallory's other five, each once its worker decodes it
    status, answer = await mallory
    assert status == 200
    assert [d["code"] for d in answer["diagnostics"]] == ["INVALID_IMAGE"] * BOMBS
    assert decodes(daemon) == BOMBS + 1
    assert daemon.peak_rss() < PEAK_RSS
