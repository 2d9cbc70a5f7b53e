"""Derivations waiting for a decode worker used to hold their source's bytes: each preview read its source
when it was asked for, then queued, so that many previews of large sources held them all at once. Now a
derivation reads its source when a worker is there for it.

A scan-bomb JPEG (some 50 s of decoding) keeps the one decode worker busy while the others queue; the test
ends it by crashing its worker, not by the clock."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from PIL import Image

from tests.support import images
from tests.support.decoders import answered, crash_decoder, planted, polled, preview, queue

MiB = 1 << 20
SOURCES = 6
SIZES = (64, 128, 256, 512)
WIDTH, HEIGHT = 1000, 1150  # 3.45 MB of stored PNG: under the default max_image_bytes


def _source(n: int) -> bytes:
    """A flat PNG stored without compression: 3.45 MB, made at once."""
    return images.encode(Image.new("RGB", (WIDTH, HEIGHT), (n, 80, 160)), "PNG", compress_level=0)


async def test_a_queued_derivation_holds_no_source_bytes(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"decode_workers": 1, "decode_timeout": "600s"})
    bomb = (images.jpeg_scan_bomb(20_000, 2000), "image/jpeg", 2000, 2000)
    sources = [(_source(n), "image/png", WIDTH, HEIGHT) for n in range(SOURCES)]
    blocker, *refs = await planted(daemon, "mallory", [bomb, *sources])
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
        first = asyncio.ensure_future(preview(http, daemon, "mallory", blocker, 64))
        await polled(lambda: queue(daemon) == (1, 0), "the bomb to decode")
        reads = daemon.metric("attachstore_reads_total", result="ok")
        assert reads == 1  # the bomb's source, read as its worker took it
        before = daemon.rss()

        jobs = [(ref, size) for ref in refs for size in SIZES]
        queued = [asyncio.ensure_future(preview(http, daemon, "mallory", r, s)) for r, s in jobs]
        await polled(lambda: queue(daemon) == (1, len(jobs)), "the previews to queue")
        # Twenty-four previews of 3.45 MB sources queued: none has read its source yet.
        assert daemon.metric("attachstore_reads_total", result="ok") == reads
        held = daemon.rss() - before
        assert held < 20 * MiB, f"{held / MiB:.0f} MiB more resident with the previews queued"

        crash_decoder(daemon.proc.pid)
        status, _, _ = await answered(first, "the bomb's preview was not answered")
        assert status == 422
        answers = await answered(asyncio.gather(*queued), "the queued previews were not answered")
    assert [status for status, _, _ in answers] == [200] * len(jobs)
    # Each source read once a worker was there for it (and each preview once, to be sent).
    assert daemon.metric("attachstore_reads_total", result="ok") == reads + 2 * len(jobs)
    # One source and its preview in hand at a time, over a daemon of some 60-80 MB.
    assert daemon.peak_rss() < before + 60 * MiB
    daemon.assert_alice_is_served()
