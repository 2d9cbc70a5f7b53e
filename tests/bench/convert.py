"""The convert scenario: admitting an image in a format stored only converted (HEIC, AVIF, BMP, TIFF:
docs/normalization.md), against its floor: the same decode and encode in a bare process, which opens the file
with the same decoder (pi-heif for HEIC, Pillow for the rest), applies its orientation, converts its colours
to sRGB where it has a profile, and writes the JPEG or PNG that admission stores, with the encoder settings
admission uses, and nothing else: no checks, no second decode, no hash, no fsync.

Admission runs on the service as the daemon's handler calls it (`Store.admit`: the bytes to a decode worker
process and back, the checks, the conversion, the hash, the durable write), so that the figure is the gate's
work and the store's, not HTTP. Each side's time is the median over rounds; the
floor's is timed inside its process, after its imports."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from attachstore.config import Config
from attachstore.service import Store, Upload
from tests.support.images import encode, ui_screenshot

from .stats import paired_ratio

CORPUS = Path(__file__).resolve().parents[1] / "gate" / "corpus" / "sources"


# What people have: an iPhone's HEIC (the corpus's, 48 tiles), an AVIF photo, a Full HD screenshot saved as a
# Windows bitmap, and a page of an A4 document at 300 dpi as an LZW TIFF.
FILES: dict[str, Callable[[], bytes]] = {
    "arrow.heic": (CORPUS / "heic" / "arrow.heic").read_bytes,
    "kodim03.avif": (CORPUS / "avif" / "kodim03_yuv420_8bpc.avif").read_bytes,
    "screenshot-1920x1080.bmp": lambda: encode(ui_screenshot(1920, 1080), "BMP"),
    "page-2480x3508.tif": lambda: encode(ui_screenshot(2480, 3508), "TIFF", compression="tiff_lzw"),
}
FLOOR = """\
import io, sys, time
from PIL import Image, ImageCms, ImageOps
import pi_heif
pi_heif.register_heif_opener()
data = open(sys.argv[1], "rb").read()
kind = sys.argv[2]
Image.init()  # every plugin imported before the clock starts, as in a decode worker
started = time.perf_counter()
with Image.open(io.BytesIO(data)) as im:
    profile = im.info.get("icc_profile")
    im = ImageOps.exif_transpose(im)
    if profile:  # its colours to sRGB, as admission converts them
        source = ImageCms.ImageCmsProfile(io.BytesIO(profile))
        im = ImageCms.profileToProfile(im, source, ImageCms.createProfile("sRGB"), outputMode=im.mode)
    out = io.BytesIO()
    if kind == "image/png":
        im.save(out, "PNG", compress_level=6)
    else:
        im.convert("RGB").save(out, "JPEG", quality=90, optimize=True, subsampling="4:2:0")
print(time.perf_counter() - started)
"""


async def _admit(store: Store, data: bytes) -> tuple[float, str]:
    started = time.perf_counter()
    admitted = await store.admit([Upload.of_bytes(data)], "user")
    took = time.perf_counter() - started
    [attachment] = admitted.attachments
    return took, attachment.media_type


async def _file(path: Path, data: bytes, data_dir: Path, floor_script: Path, rounds: int) -> dict[str, Any]:
    config = msgspec.convert({"data_dir": str(data_dir), "admission": {"decode_workers": 0}}, Config)
    store = await Store.open(config)
    try:
        _, stored = await _admit(store, data)  # unmeasured: the decoders' libraries loaded

        def floor() -> dict[str, float]:
            done = subprocess.run(
                [sys.executable, str(floor_script), str(path), stored],
                capture_output=True,
                text=True,
                check=True,
            )
            return {"ms": float(done.stdout) * 1000}

        ours: list[dict[str, float]] = []
        floors: list[dict[str, float]] = []
        for r in range(rounds):  # in pairs, the side that goes first changing, as stats.alternate does
            if r % 2:
                floors.append(floor())
            ours.append({"ms": (await _admit(store, data))[0] * 1000})
            if not r % 2:
                floors.append(floor())
        return {
            "bytes": len(data),
            "stored": stored,
            "ms": statistics.median(x["ms"] for x in ours),
            "floor_ms": statistics.median(x["ms"] for x in floors),
            "ratio": paired_ratio(ours, floors, "ms"),
        }
    finally:
        await store.close()


def convert(work: Path, rounds: int) -> dict[str, Any]:
    floor_script = work / "convert-floor.py"
    floor_script.write_text(FLOOR)
    files = {}
    for i, (name, made) in enumerate(FILES.items()):
        path = work / f"convert-{name}"
        path.write_bytes(made())
        files[name] = asyncio.run(
            _file(path, path.read_bytes(), work / f"store-convert-{i}", floor_script, rounds)
        )
    return {
        "workload": (
            "one admission (source user) of each file through the service and its decode workers; "
            f"{rounds} rounds"
        ),
        "floor": "a bare process: open with the same decoder, apply the orientation, encode the stored type "
        "with admission's settings (timed after its imports)",
        "files": files,
    }
