"""The decode worker: a child process that runs the gate's deep checks and hashes the bytes.

Image decoding runs in separate processes so that a pathological file can be cut off by killing its worker
(threads cannot be stopped) and so that decoding never holds the daemon's event loop or its GIL.
Protocol on stdin/stdout: frames of a 4-byte big-endian length followed by a msgpack message.
"""

from __future__ import annotations

import struct
import sys
from typing import BinaryIO

import msgspec

from .config import Limits
from .errors import Rejected
from .refs import Ref

LENGTH = struct.Struct(">I")


class Job(msgspec.Struct, array_like=True):
    data: bytes
    declared: str | None
    limits: Limits
    algorithm: str
    trailing_data: str = "allow"  # gate.inspect's: "reject" refuses bytes after the image's end


class Passed(msgspec.Struct, tag=True, array_like=True):
    media_type: str
    width: int
    height: int
    frames: int
    digest: str


class Failed(msgspec.Struct, tag=True, array_like=True):
    code: str
    message: str
    hint: str | None


Outcome = Passed | Failed
job_encoder = msgspec.msgpack.Encoder()
job_decoder = msgspec.msgpack.Decoder(Job)
outcome_decoder = msgspec.msgpack.Decoder(Outcome)


READY = b"ready"


def run(job: Job) -> Outcome:
    from .gate import inspect

    try:
        found = inspect(job.data, job.declared, job.limits, trailing_data=job.trailing_data)
    except Rejected as e:
        return Failed(e.code, e.message, e.hint)
    digest = Ref.of(job.algorithm, job.data).digest
    return Passed(found.media_type, found.width, found.height, found.frames, digest)


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def main() -> None:
    from . import gate  # noqa: F401  # load Pillow before saying ready, so no job's time bound pays for it

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
        reply = encoder.encode(run(job_decoder.decode(body)))
        stdout.write(LENGTH.pack(len(reply)) + reply)
        stdout.flush()


if __name__ == "__main__":
    main()
