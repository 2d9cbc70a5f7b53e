"""The decode worker: a child process that runs the gate's deep checks and hashes the bytes, so that a
pathological file can be cut off by killing it (docs/design.md, "The decode worker pool", for why and its
protocol)."""

from __future__ import annotations

import functools
import mmap
import os
import socket
import struct
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, BinaryIO

import msgspec

from ..config import Limits
from ..errors import Rejected
from ..refs import Checker, Ref
from .sources import NAMES as SOURCES

if TYPE_CHECKING:
    from .checks import Inspection

LENGTH = struct.Struct(">I")


class Job(msgspec.Struct, tag=True, array_like=True):
    data: bytes
    declared: str | None
    limits: Limits
    algorithm: str
    trailing_data: str = "allow"  # checks.inspect's: "reject" refuses bytes after the image's end
    # Set when oversize images are fitted: the limits an upload must meet to be fitted to `limits`.
    fit_limits: Limits | None = None
    strip_metadata: bool = False
    again: str = "read it again"  # how the hints that ask for the image once more end (checks.READ_AGAIN)
    shared: int = 0  # the size of the sealed memory file sent with the job that holds the bytes (then `data`
    # is empty); 0: the bytes are `data`
    check_key: bytes | None = (
        None  # with it, a sha256-addressed result carries its keyed check (refs.Checker)
    )
    # Sources (HEIC, HEIF, AVIF, BMP, TIFF) are converted to PNG or JPEG; False: they are refused, as they
    # cannot be stored as they came (an exact admission, a re-index)
    convert: bool = False


class Derive(msgspec.Struct, tag=True, array_like=True):
    data: bytes
    media_type: str
    target: tuple[int, int, int]  # max_side, max_pixels, max_bytes
    limits: Limits
    source_limits: Limits  # Pillow's bomb bounds while the source decodes
    algorithm: str
    preview: bool = False  # normalize.fit's: a still image, a PNG tried first for PNG and GIF sources
    check_key: bytes | None = None  # as Job's


class Original(msgspec.Struct, array_like=True):
    media_type: str
    bytes: int
    width: int
    height: int


class Passed(msgspec.Struct, tag=True, array_like=True):
    media_type: str
    width: int
    height: int
    frames: int
    digest: str
    data: bytes | None = None  # the bytes to store, when they are not the input's
    original: Original | None = None
    steps: list[str] = msgspec.field(default_factory=list)
    check: str | None = None  # the keyed check of the bytes to store, made beside their digest


class Failed(msgspec.Struct, tag=True, array_like=True):
    code: str
    message: str
    hint: str | None


Outcome = Passed | Failed
job_encoder = msgspec.msgpack.Encoder()
job_decoder = msgspec.msgpack.Decoder(Job | Derive)
outcome_decoder = msgspec.msgpack.Decoder(Outcome)

# The gate's codes for an image over a size limit: the ones `fit` turns into a normalization.
OVERSIZE = frozenset({"IMAGE_TOO_LARGE", "IMAGE_DIMENSION_TOO_LARGE", "IMAGE_TOO_MANY_PIXELS"})

READY = b"ready"
TOOK = b"took"  # a job read whole, its shared memory with it: what happens next is the job's doing


def run(job: Job | Derive) -> Outcome:
    try:
        passed = _derive(job) if isinstance(job, Derive) else _admit(job)
    except Rejected as e:
        return Failed(e.code, e.message, e.hint)
    if job.check_key is not None and job.algorithm == "sha256":
        # Here, on the bytes just hashed to their address, not on the daemon's event loop; bound to what
        # their row will say of them: their ref, size and media type.
        stored = job.data if passed.data is None else passed.data
        ref = f"sha256:{passed.digest}"
        passed.check = _checker(job.check_key).of(ref, len(stored), passed.media_type, stored)
    return passed


@functools.cache
def _checker(key: bytes) -> Checker:
    return Checker(key)


def _admit(job: Job) -> Passed:
    from .checks import inspect
    from .metadata import strip_metadata

    try:
        found = inspect(
            job.data,
            job.declared,
            job.limits,
            trailing_data=job.trailing_data,
            again=job.again,
            convert=job.convert,
        )
    except Rejected as e:
        if job.fit_limits is None or e.code not in OVERSIZE:
            raise
        return _fit(job, job.fit_limits, e)
    if found.media_type in SOURCES:
        return _normalized(job, found, job.limits)
    if job.strip_metadata:
        stripped = strip_metadata(job.data, found.media_type)
        if stripped is not job.data:
            # Lossless surgery on the container, and still the stored bytes pass the whole gate.
            stored = inspect(stripped, found.media_type, job.limits, trailing_data="reject")
            original = Original(found.media_type, len(job.data), found.width, found.height)
            return _passed(stored, stripped, job.algorithm, original=original, steps=["metadata"])
    return _passed(found, job.data, job.algorithm, new_bytes=False)


def _fit(job: Job, fit_limits: Limits, oversize: Rejected) -> Passed:
    from .checks import inspect

    found = inspect(
        job.data,
        job.declared,
        fit_limits,
        trailing_data=job.trailing_data,
        again=job.again,
        convert=job.convert,
    )
    return _normalized(job, found, fit_limits, oversize)


def _normalized(
    job: Job, found: Inspection, source_limits: Limits, oversize: Rejected | None = None
) -> Passed:
    """`found` normalized to fit job.limits: an image over them (`oversize` says how), or a source."""
    from .checks import inspect
    from .normalize import Target, Unfittable, fit
    from .strict import reason, strict_pillow

    limits = job.limits
    # An animation's frames together stay within max_animation_pixels too: the source may have more. A
    # source becomes one still image.
    frames = 1 if found.media_type in SOURCES else found.frames
    pixels = min(limits.max_pixels, limits.max_animation_pixels // frames)
    target = Target(limits.max_side, pixels, limits.max_image_bytes)
    try:
        with strict_pillow(source_limits):  # Pillow's bomb bounds as the gate just had them
            out = fit(job.data, found.media_type, target)
    except Unfittable as e:
        if oversize is None:
            raise Rejected("IMAGE_TOO_LARGE", f"converting the image failed: {e}") from None
        raise Rejected(
            oversize.code, f"{oversize.message}; fitting it failed: {e}", hint=oversize.hint
        ) from None
    except Exception as e:  # a source's first decode is the conversion's: a damaged one fails here
        if found.media_type not in SOURCES:
            raise
        name = SOURCES[found.media_type]
        raise Rejected("INVALID_IMAGE", f"the {name} image is damaged: {reason(e)}") from None
    stored = inspect(out.data, out.media_type, limits, trailing_data="reject")
    original = Original(found.media_type, len(job.data), found.width, found.height)
    return _passed(stored, out.data, job.algorithm, original=original, steps=out.steps)


def _derive(job: Derive) -> Passed:
    from .checks import inspect
    from .normalize import Target, Unfittable, fit
    from .strict import strict_pillow

    try:
        with strict_pillow(job.source_limits):
            out = fit(job.data, job.media_type, Target(*job.target), preview=job.preview)
    except Unfittable as e:
        what = "no preview of that size" if job.preview else "no variant within the route's limits"
        raise Rejected("IMAGE_TOO_LARGE", f"{what}: {e}") from None
    stored = inspect(out.data, out.media_type, job.limits, trailing_data="reject")
    return _passed(stored, out.data, job.algorithm, steps=out.steps)


def _passed(
    found: Inspection,
    data: bytes,
    algorithm: str,
    *,
    new_bytes: bool = True,
    original: Original | None = None,
    steps: Sequence[str] = (),
) -> Passed:
    digest = Ref.of(algorithm, data).digest
    sent_back = data if new_bytes else None
    return Passed(
        found.media_type, found.width, found.height, found.frames, digest, sent_back, original, list(steps)
    )


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _shared_bytes(fds: socket.socket, size: int) -> bytes:
    _, received, _, _ = socket.recv_fds(fds, 1, 1)
    if len(received) != 1:
        raise ConnectionError("a job's shared memory did not arrive")
    try:
        if os.fstat(received[0]).st_size != size:
            raise ConnectionError("a job's shared memory is not of the size announced")
        if size == 0:
            return b""
        with mmap.mmap(received[0], size, mmap.MAP_SHARED, mmap.PROT_READ) as mapped:
            return mapped[:]
    finally:
        os.close(received[0])


def main() -> None:
    from . import checks, normalize, sources  # noqa: F401  # load Pillow first, so no job's time bound pays for it

    for media_type in SOURCES:  # and the sources' decoders: pi-heif is registered here, in the worker only
        sources.plugin(media_type)

    fds = None
    if "--fds" in sys.argv:
        fds = socket.socket(fileno=int(sys.argv[sys.argv.index("--fds") + 1]))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    encoder = msgspec.msgpack.Encoder()
    stdout.write(LENGTH.pack(len(READY)) + READY)
    stdout.flush()
    while True:
        header = _read_exact(stdin, LENGTH.size)
        if header is None:
            return
        body = _read_exact(stdin, LENGTH.unpack(header)[0])
        if body is None:
            return
        job = job_decoder.decode(body)
        if isinstance(job, Job) and job.shared:
            if fds is None:
                raise ConnectionError("a job in shared memory, but no socket to receive it on")
            job = msgspec.structs.replace(job, data=_shared_bytes(fds, job.shared))
        stdout.write(LENGTH.pack(len(TOOK)) + TOOK)
        stdout.flush()
        reply = encoder.encode(run(job))
        stdout.write(LENGTH.pack(len(reply)) + reply)
        stdout.flush()
