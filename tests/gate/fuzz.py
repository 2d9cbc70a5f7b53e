"""An atheris (libFuzzer) target for gate.inspect: `make fuzz`, or by hand

    python -m tests.gate.fuzz -max_total_time=60 -artifact_prefix=build/fuzz/ build/fuzz/corpus

A Rejected is an answer; any other exception, a container walk raising anything but Malformed, or the two
trailing_data modes disagreeing (the properties of tests/gate/test_properties.py) crashes the fuzzer, which
keeps the input under -artifact_prefix. The seed corpus, small valid images of every format from
tests/support/images.py, is written into the corpus directory (the first argument that is not a flag) before
fuzzing starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["attachstore", "PIL"]):
    # Pillow loads its plugins when it first opens a file: loaded here, they are instrumented too.
    from PIL import GifImagePlugin, JpegImagePlugin, MpoImagePlugin, PngImagePlugin, WebPImagePlugin  # noqa: F401

    from attachstore.config import Limits
    from attachstore.errors import Rejected
    from attachstore.gate import containers
    from attachstore.gate.checks import Inspection, inspect
    from attachstore.gate.probe import probe_header

from tests.support import images

# Smaller than the defaults, so that a header mutated to claim a large image costs little to decode.
LIMITS = Limits(max_side=1024, max_pixels=262_144, max_frames=16, max_animation_pixels=1_048_576)
CODES = images.INSPECT_CODES


def seeds() -> dict[str, bytes]:
    return {
        "png": images.png(12, 9),
        "png-palette": images.png(12, 9, "P"),
        "png-interlaced": images.png(12, 9, "RGBA", interlace=1),
        "apng": images.apng(12, 9, 3),
        "apng-default-image": images.apng(12, 9, 2, default_image=True),
        "jpeg": images.jpeg(12, 9),
        "jpeg-progressive": images.jpeg(12, 9, progressive=True),
        "jpeg-cmyk": images.jpeg(12, 9, "CMYK"),
        "jpeg-restarts": images.jpeg(24, 16, restart_marker_blocks=1),
        "mpo": images.mpo(12, 9, 2),
        "gif": images.gif(12, 9),
        "gif-animated": images.gif_animated(12, 9, 3),
        "webp": images.webp(12, 9),
        "webp-lossless": images.webp(12, 9, lossless=True),
        "webp-alpha": images.webp(12, 9, "RGBA"),
        "webp-animated": images.webp_animated(12, 9, 3),
    }


def outcome(data: bytes, trailing_data: str) -> Inspection | Rejected:
    try:
        return inspect(data, None, LIMITS, trailing_data=trailing_data)
    except Rejected as e:
        return e


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


WALKS = (containers.png_end, containers.gif_end, containers.webp_end, containers.jpeg_end)


def test_one_input(data: bytes) -> None:
    # The gate turns any exception from its walks into INVALID_IMAGE, which would hide a bug in them: so
    # they are also run bare, on every input, where only Malformed may come out.
    for walk in WALKS:
        try:
            end = walk(data)
        except containers.Malformed as e:
            expect(bool(str(e)) and "\n" not in str(e), f"bad message {e}")
        else:
            expect(0 < end <= len(data), f"{walk.__name__} ends at {end} of {len(data)}")
    allow, reject = outcome(data, "allow"), outcome(data, "reject")
    for answer in (allow, reject):
        if isinstance(answer, Rejected):
            expect(answer.code in CODES, f"undocumented code {answer.code}")
            expect(bool(answer.message) and "\n" not in answer.message, f"bad message {answer.message!r}")
    if isinstance(allow, Inspection):
        header = probe_header(data)
        expect(
            header is not None and (header.width, header.height) == (allow.width, allow.height),
            f"admitted at {allow.width}x{allow.height} but the header says {header}",
        )
    if isinstance(reject, Inspection):
        expect(allow == reject, f"reject admits {reject} where allow answers {allow}")
        after = outcome(data + b"\x00", "reject")
        expect(
            isinstance(after, Rejected) and after.message.startswith("1 byte follows"),
            f"one byte appended to an image that ends where its bytes end: {after}",
        )
    elif isinstance(allow, Rejected):
        expect(reject.code == allow.code, f"allow answers {allow.code} but reject {reject.code}")


def main() -> None:
    corpus = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if corpus is not None:
        Path(corpus).mkdir(parents=True, exist_ok=True)
        for name, data in seeds().items():
            (Path(corpus) / f"seed-{name}").write_bytes(data)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
