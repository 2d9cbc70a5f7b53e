"""Uploads in shared memory (gate/shared.py): sealed before a worker sees them, handed over by descriptor,
decoded from base64 straight into them with decode_base64's very refusals, and let go of on every path."""

from __future__ import annotations

import asyncio
import base64
import errno
import fcntl
import gc
import mmap
import os
import resource
import signal
from pathlib import Path

import pytest

from attachstore.config import Limits
from attachstore.errors import Rejected, ServerBusy
from attachstore.gate import DecodePool, Passed, SharedBuffer, decode_base64_shared, shared
from attachstore.gate.base64text import decode_base64
from tests.support import images
from tests.support.waiting import eventually, let_run

DEFAULTS = Limits()


def mappings() -> int:
    """This process's mappings of upload memory."""
    return Path("/proc/self/maps").read_text().count("memfd:attachstore-upload")


def mapped_uploads() -> int:
    """This process's mappings and descriptors of upload memory (an mmap keeps a descriptor of its own)."""
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += "memfd:attachstore-upload" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return mappings() + fds


def _decode_workers() -> list[int]:
    """The pids of this process's decode workers."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(stat[1]) == os.getpid() and b"attachstore.gate" in command:
            found.append(int(entry.name))
    return found


def test_a_sealed_buffer_cannot_be_changed_by_anyone() -> None:
    buf = SharedBuffer()
    buf.write(b"abc")
    buf.write(memoryview(b"defg"))
    view = buf.seal()
    assert (bytes(view), len(buf), buf.head(2)) == (b"abcdefg", 7, b"ab")
    seals = fcntl.fcntl(buf.fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_WRITE
    assert seals & fcntl.F_SEAL_SEAL
    with pytest.raises(PermissionError):
        os.write(buf.fd, b"x")
    with pytest.raises(PermissionError):
        os.ftruncate(buf.fd, 3)
    # Not even a writable mapping, which is how a worker would change them under the daemon.
    with pytest.raises(PermissionError):
        mmap.mmap(buf.fd, 7, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    buf.close()


def test_closed_and_let_go_of_the_memory_is_gone() -> None:
    gc.collect()
    before = mapped_uploads()
    maps = mappings()
    buf = SharedBuffer.of(b"x" * 100_000)
    view = buf.seal()
    assert mappings() == maps + 1
    buf.close()
    assert mappings() == maps + 1  # the view still reads it (a write of the object, say)
    assert view[:1] == b"x"
    del view, buf
    assert mapped_uploads() == before
    unclosed = SharedBuffer.of(b"y")  # never closed: its descriptor goes with the object
    del unclosed
    assert mapped_uploads() == before


def test_an_empty_buffer_seals_to_no_bytes() -> None:
    buf = SharedBuffer.of(b"")
    assert (bytes(buf.seal()), buf.head(64)) == (b"", b"")


@pytest.mark.parametrize("size", [0, 1, 2, 3, 48_000, 49_152, 49_153, 200_001])
def test_base64_decoded_into_shared_memory_is_decode_base64(size: int) -> None:
    data = os.urandom(size)
    text = base64.b64encode(data).decode()
    assert bytes(decode_base64_shared(text).seal()) == decode_base64(text) == data


LONG = base64.b64encode(os.urandom(100_000)).decode()  # longer than one decoded piece


@pytest.mark.parametrize(
    "text",
    [
        "QQ",
        "QR==",
        "Q===",
        "QQ==QUJD",
        "data:image/png;base64,QUJD",
        "QUJD\nQUJD",
        "QU-D",
        "éééé",
        LONG[:70_000] + " " + LONG[70_001:],  # whitespace in a later piece
        LONG[:-4] + "QR==",  # bits left over at the very end
        LONG[:65_536] + "QQ==" + LONG[65_540:],  # padding at the start of a piece
    ],
)
def test_base64_refusals_are_decode_base64s_own(text: str) -> None:
    with pytest.raises(Rejected) as expected:
        decode_base64(text)
    gc.collect()
    before = mapped_uploads()
    with pytest.raises(Rejected) as got:
        decode_base64_shared(text)
    assert (got.value.code, got.value.message, got.value.hint) == (
        expected.value.code,
        expected.value.message,
        expected.value.hint,
    )
    del got
    gc.collect()
    assert mapped_uploads() == before


async def test_a_worker_reads_the_upload_from_shared_memory() -> None:
    pool = DecodePool(1, 60.0)
    try:
        data = images.png(40, 30)
        shared = SharedBuffer.of(data)
        by_descriptor = await pool.inspect(shared, None, DEFAULTS, "sha256")
        inline = await pool.inspect(data, None, DEFAULTS, "sha256")
        assert by_descriptor == inline
        assert (by_descriptor.width, by_descriptor.height, by_descriptor.data) == (40, 30, None)
        unsealed = SharedBuffer()
        unsealed.write(data)
        assert await pool.inspect(unsealed, None, DEFAULTS, "sha256") == inline  # sealed on its way
        with pytest.raises(PermissionError):
            os.write(unsealed.fd, b"x")
        bad = await asyncio.gather(
            pool.inspect(SharedBuffer.of(b"\x89PNG\r\n\x1a\n" + b"\0" * 40), None, DEFAULTS, "sha256"),
            return_exceptions=True,
        )
        assert isinstance(bad[0], Rejected)
    finally:
        await pool.close()


def _bomb(pool: DecodePool) -> asyncio.Future[Passed]:
    return asyncio.ensure_future(
        pool.inspect(SharedBuffer.of(images.jpeg_scan_bomb(3000)), None, DEFAULTS, "sha256")
    )


async def _decoding(pool: DecodePool) -> asyncio.Future[Passed]:
    """A slow job, once a worker decodes it (or once it ended without, for the caller's await to tell why)."""
    job = _bomb(pool)
    await eventually(
        lambda: job.done() or pool.metrics.registry.get_sample_value("attachstore_decodes_running"),
        "a worker to take the job",
    )
    return job


async def test_a_worker_that_dies_or_is_cut_off_leaves_no_shared_memory_behind() -> None:
    gc.collect()
    before = mapped_uploads()
    pool = DecodePool(1, 0.5)
    try:
        bomb = SharedBuffer.of(images.jpeg_scan_bomb(3000))
        with pytest.raises(Rejected) as slow:
            await pool.inspect(bomb, None, DEFAULTS, "sha256")
        assert slow.value.code == "INVALID_IMAGE"
        job = _bomb(pool)
        # Cancelled while its worker starts (the last one was ended): once the worker runs, and its pipes are
        # connected, the job waits for the worker to say it is ready.
        await eventually(lambda job=job: job.done() or _decode_workers(), "its worker to start")
        await let_run()
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        job = await _decoding(pool)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        crashing = await _decoding(pool)
        for child in _decode_workers():
            os.kill(child, signal.SIGKILL)  # a decoder crash, as a segfault would end it
        with pytest.raises(Rejected) as crashed:
            await crashing
        assert crashed.value.code == "INVALID_IMAGE"
        bomb.close()
        del bomb, job, slow, crashing, crashed
        # The bombs above had to run out of the short time bound; this tiny image must pass, however long a
        # loaded machine stalls its fresh worker. The pool reads its timeout for each job.
        pool.timeout = 60.0
        assert (await pool.inspect(SharedBuffer.of(images.png(4, 4)), None, DEFAULTS, "sha256")).width == 4
    finally:
        await pool.close()
    gc.collect()
    assert mapped_uploads() == before


def test_a_write_to_a_sealed_buffer_fails_with_eperm() -> None:
    buf = SharedBuffer.of(b"z")
    with pytest.raises(PermissionError) as e:
        buf.write(b"more")
    assert e.value.errno == errno.EPERM


def test_the_fast_decoder_accepts_exactly_what_decode_base64_does() -> None:
    """Random short texts over the alphabet, padding and what is not base64: decode_base64_shared (pybase64
    on each piece, decode_base64 on a failure) gives decode_base64's bytes or its refusal, every time."""
    import random

    rng = random.Random(20)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" + "=" * 8 + "-_ \n\xe9"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 2, 4, 8, 12, 16])))
        try:
            expected: bytes | str = decode_base64(text)
        except Rejected as e:
            expected = e.message
        try:
            got: bytes | str = bytes(decode_base64_shared(text).seal())
        except Rejected as e:
            got = e.message
        assert got == expected, text


def test_the_uploads_in_progress_hold_at_most_their_share_of_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared, "DESCRIPTORS", shared.Descriptors(limit=2))
    first, second = SharedBuffer(), SharedBuffer()
    with pytest.raises(ServerBusy, match="RLIMIT_NOFILE"):
        SharedBuffer()
    first.close()
    third = SharedBuffer()  # a closed buffer's descriptor is given back
    del second  # and so is one nobody holds any more
    gc.collect()
    fourth = SharedBuffer()
    assert shared.DESCRIPTORS.held == 2
    third.close()
    fourth.close()
    assert shared.DESCRIPTORS.held == 0


def test_the_share_is_a_quarter_of_the_open_file_limit() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY:
        assert shared.Descriptors().limit == soft // 4
