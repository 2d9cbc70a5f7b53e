"""Properties of gate.inspect under random damage, checked with hypothesis on valid images of every format.

Whatever is done to the bytes (flips, insertions, deletions, cuts, a chunk or segment repeated), inspect ends
in an Inspection or a Rejected with one of the SPEC's codes, never another exception; and the two
trailing_data modes agree: "reject" refuses only what "allow" refuses or bytes after the end.
Derandomized and without an example database, so every run (and CI) tries the same examples.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attachstore.config import Limits
from attachstore.errors import Rejected
from attachstore.gate import containers
from attachstore.gate.checks import Inspection, inspect
from attachstore.gate.probe import probe_header
from tests.support import images

DEFAULTS = Limits()
EXAMPLES_PER_FORMAT = 25  # 8 formats: 200 examples in all, some 10 s

VALID: dict[str, Callable[[], bytes]] = {
    "PNG": lambda: images.png(12, 9, "P"),
    "APNG": lambda: images.apng(12, 9, 3),
    "JPEG": lambda: images.jpeg(12, 9, progressive=True),
    "MPO": lambda: images.mpo(12, 9, 2),
    "GIF": lambda: images.gif(12, 9),
    "GIF animated": lambda: images.gif_animated(12, 9, 3),
    "WebP": lambda: images.webp(12, 9),
    "WebP animated": lambda: images.webp_animated(12, 9, 3),
}


@cache
def units(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of the structural units of a valid image: PNG chunks, JPEG marker segments and scans,
    GIF frames, WebP RIFF chunks."""
    if data.startswith(b"\x89PNG"):
        return [(c.offset, c.end) for c in images.png_chunks(data)]
    if data.startswith(b"\xff\xd8"):
        scans = images.jpeg_scans(data)
        out, pos = [], 2
        while pos < scans[0][0]:
            end = pos + 2 + struct.unpack_from(">H", data, pos + 2)[0]
            out.append((pos, end))
            pos = end
        return out + scans
    if data.startswith(b"GIF"):
        frames = images.gif_descriptors(data)
        return list(zip(frames, [*frames[1:], len(data) - 1], strict=True))
    out, pos = [], 12
    while pos + 8 <= len(data):
        size = struct.unpack_from("<I", data, pos + 4)[0]
        out.append((pos, pos + 8 + size + (size & 1)))
        pos += 8 + size + (size & 1)
    return out


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` with maybe one structural unit repeated, then up to three byte-level mutations."""
    out = bytearray(data)
    if draw(st.booleans()):
        start, end = draw(st.sampled_from(units(data)))
        at = draw(st.sampled_from([end, *(s for s, _ in units(data))]))
        out[at:at] = data[start:end]
        if data.startswith(b"RIFF") and draw(st.booleans()):  # keep the RIFF size right, or not
            struct.pack_into("<I", out, 4, len(out) - 8)
    for _ in range(draw(st.integers(0 if len(out) != len(data) else 1, 3))):
        if not out:
            break
        at = draw(st.integers(0, len(out) - 1))
        kind = draw(st.sampled_from(["flip", "flip with its CRC", "insert", "delete", "cut", "append"]))
        if kind == "flip":
            out[at] ^= draw(st.integers(1, 255))
        elif kind == "flip with its CRC" and out.startswith(b"\x89PNG"):
            _flip_in_a_chunk(out, at, draw(st.integers(1, 255)))
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del out[at : at + draw(st.integers(1, 16))]
        elif kind == "cut":
            del out[at:]
        elif kind == "append":
            out += draw(st.binary(min_size=1, max_size=16))
    return bytes(out)


def _flip_in_a_chunk(out: bytearray, at: int, mask: int) -> None:
    """A PNG byte flipped inside a chunk body and that chunk's CRC made right again, so that the damage gets
    past the chunk walk to the decoder."""
    for chunk in images.png_chunks(bytes(out)):
        if chunk.offset + 8 <= at < chunk.offset + 8 + chunk.length and chunk.end <= len(out):
            out[at] ^= mask
            crc = zlib.crc32(out[chunk.offset + 4 : chunk.end - 4])
            struct.pack_into(">I", out, chunk.end - 4, crc)
            return


def outcome(data: bytes, trailing_data: str) -> Inspection | Rejected:
    """What inspect answers; any exception but Rejected fails the property."""
    try:
        return inspect(data, None, DEFAULTS, trailing_data=trailing_data)
    except Rejected as e:
        return e


def walked(walk: Callable[[bytes], int], data: bytes) -> int | containers.Malformed:
    """Where `walk` says the image ends; any exception but Malformed fails the property."""
    try:
        return walk(data)
    except containers.Malformed as e:
        return e


def check(data: bytes) -> None:
    # The gate turns any exception inside its decode step into INVALID_IMAGE, which would hide a bug in the
    # container walks: they are run bare as well, where only Malformed may come out.
    for walk in (containers.png_end, containers.gif_end, containers.webp_end, containers.jpeg_end):
        end = walked(walk, data)
        if isinstance(end, containers.Malformed):
            assert str(end)
            assert "\n" not in str(end)
        else:
            assert 0 < end <= len(data)
    allow, reject = outcome(data, "allow"), outcome(data, "reject")
    for answer in (allow, reject):
        if isinstance(answer, Rejected):
            assert answer.code in images.INSPECT_CODES, answer.code
            assert answer.message
            assert "\n" not in answer.message
    if isinstance(allow, Inspection):
        header = probe_header(data)  # what is admitted has the size its header says
        assert header is not None
        assert (allow.media_type, allow.width, allow.height) == (
            header.media_type,
            header.width,
            header.height,
        )
    if isinstance(reject, Inspection):
        assert allow == reject  # "reject" admits nothing that "allow" refuses
        after = outcome(data + b"\x00", "reject")  # and it found the end where the bytes end
        assert isinstance(after, Rejected)
        assert after.message.startswith("1 byte follows the end of the image")
    elif isinstance(allow, Rejected):
        assert reject.code == allow.code  # the same check fails first


@pytest.mark.parametrize("name", VALID)
def test_every_valid_image_passes_the_checks(name: str) -> None:
    check(VALID[name]())


@pytest.mark.parametrize("name", VALID)
@settings(
    max_examples=EXAMPLES_PER_FORMAT,
    # No deadline: hypothesis' fails an example that only ran slow (a loaded machine), and cannot stop one
    # that hangs, so it guarded nothing. Tests never time things.
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.data())
def test_damage_ends_in_success_or_a_documented_code(name: str, data: st.DataObject) -> None:
    check(data.draw(damaged(VALID[name]()), label="damaged"))
