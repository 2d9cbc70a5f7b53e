"""Scan-bomb JPEGs: a few hundred KB each, valid, and some 50 s of decoding, so that only a time bound, a
cancellation or the crash of their worker stops them. One request of several used to keep the decoders for
all of them, after its verdict was known or its client had gone, while another tenant's small admission
waited behind it."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import images
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


async def _until(condition: Any) -> None:
    """Poll the daemon's counters (run in a thread: they are read over HTTP) until `condition` holds."""
    async with asyncio.timeout(120):
        while not await asyncio.to_thread(condition):  # noqa: ASYNC110 - another process's counters
            await asyncio.sleep(0.05)


def _decodes(daemon: Any, **labels: str) -> float:
    return float(daemon.metric("attachstore_decodes_total", **labels))


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


async def test_a_client_that_disconnects_cancels_its_decodes(start_daemon: Any) -> None:
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
    await _until(lambda: daemon.metric("attachstore_decodes_running") == 1)
    writer.close()  # mallory leaves while the first bomb decodes
    await writer.wait_closed()

    await _until(lambda: daemon.metric("attachstore_admissions_total", result="cancelled") == 1)
    assert daemon.metric("attachstore_decodes_running") == 0
    assert daemon.metric("attachstore_decodes_waiting") == 0
    assert _decodes(daemon, result="cancelled") == 1
    assert _decodes(daemon) == 1  # its worker killed, and none of the other five bombs started
    await _alice_is_served(daemon)
    assert _decodes(daemon) == 2
    lines = [json.loads(line) for line in daemon.log.read_text().splitlines() if line.startswith("{")]
    [gone] = [line for line in lines if line.get("tenant") == "mallory" and line.get("msg") == "request"]
    assert gone["status"] == 499  # logged as the client that went away, not as a server error
    assert daemon.peak_rss() < PEAK_RSS


async def test_a_batch_whose_first_image_fails_decodes_none_of_the_rest(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"decode_timeout": "2s"})
    for first in (images.truncate(images.png(16, 12), 60), images.jpeg_scan_bomb(BOMB_SCANS - 1)):
        before = _decodes(daemon)
        status, answer = await _admit(daemon, "mallory", _body("user", [first, *_bombs()]))
        assert status == 422, answer
        assert (answer["error"]["code"], answer["error"]["index"]) == ("INVALID_IMAGE", 0)
        assert _decodes(daemon) == before + 1  # the verdict was known: its siblings never reached a worker
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
    assert _decodes(daemon, result="timeout") == 3
    assert _decodes(daemon) == 3
    await _alice_is_served(daemon)
    assert daemon.peak_rss() < PEAK_RSS


def _crash_the_decoder(daemon: Any) -> None:
    """SIGKILL the daemon's one decode worker, as a decoder crash (a segfault) would end it."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == daemon.proc.pid and b"attachstore.gate" in command:
            found.append(int(entry.name))
    [worker] = found
    os.kill(worker, signal.SIGKILL)


async def test_one_tenants_queue_of_decodes_does_not_hold_up_anothers(start_daemon: Any) -> None:
    # No decode here ends by the clock: the test ends each bomb by crashing its worker. What decoded before
    # alice's image is then the same however slow the machine, and counted exactly.
    daemon = start_daemon(admission={"decode_timeout": "600s", "request_decode_timeout": "3600s"}, **VISION)
    mallory = asyncio.ensure_future(_admit(daemon, "mallory", _body("tool", _bombs(), route="vision")))
    await _until(
        lambda: (
            daemon.metric("attachstore_decodes_running") == 1
            and daemon.metric("attachstore_decodes_waiting") == BOMBS - 1
        )
    )
    alice = asyncio.ensure_future(_alice_is_served(daemon))
    await _until(lambda: daemon.metric("attachstore_decodes_waiting") == BOMBS)  # hers, behind five bombs
    _crash_the_decoder(daemon)  # the bomb decoding ends
    async with asyncio.timeout(60):  # a hang guard: once that bomb ended, her image waits for none
        await alice
    # Alice's image went to the worker as soon as the bomb decoding then ended, not after the five bombs
    # queued before it: two decodes in all, and the five bombs still to decode.
    assert (_decodes(daemon, result="crashed"), _decodes(daemon, result="passed")) == (1, 1)
    assert _decodes(daemon) == 2
    await _until(lambda: daemon.metric("attachstore_decodes_running") == 1)
    assert daemon.metric("attachstore_decodes_waiting") == BOMBS - 2

    for ended in range(1, BOMBS):  # mallory's other five, each once its worker decodes it
        # The crash count first: once it is `ended`, a running decode is the next bomb's.
        await _until(
            lambda ended=ended: (
                _decodes(daemon, result="crashed") == ended
                and daemon.metric("attachstore_decodes_running") == 1
            )
        )
        _crash_the_decoder(daemon)
    status, answer = await mallory
    assert status == 200
    assert [d["code"] for d in answer["diagnostics"]] == ["INVALID_IMAGE"] * BOMBS
    assert _decodes(daemon) == BOMBS + 1
    assert daemon.peak_rss() < PEAK_RSS
