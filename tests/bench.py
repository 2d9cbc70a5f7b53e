"""`make bench`: the service against in-process floors, measured alternately in the same run.

Ratios are the result (these machines are shared and noisy); absolute figures are printed for context.
This is the first cut: it measures the service layer without HTTP. The HTTP load generator and the nginx
baseline come with the performance work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

from attachstore.config import Config
from attachstore.gate import inspect
from attachstore.refs import Ref
from attachstore.service import Store, Upload
from tests.images import jpeg, png, webp

ROUNDS = 5


async def _timed(n: int, one: Callable[[int], Awaitable[object]]) -> float:
    start = time.perf_counter()
    for i in range(n):
        await one(i)
    return time.perf_counter() - start


async def _alternate(
    n: int, subject: Callable[[int], Awaitable[object]], floor: Callable[[int], Awaitable[object]]
) -> tuple[float, float]:
    """Per-operation seconds, median over ROUNDS of alternating runs."""
    a, b = [], []
    for _ in range(ROUNDS):
        a.append(await _timed(n, subject) / n)
        b.append(await _timed(n, floor) / n)
    return statistics.median(a), statistics.median(b)


async def run() -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="attachstore-bench-") as tmp:
        config = msgspec.convert({"data_dir": tmp}, Config)
        store = await Store.open(config, workers=1)
        try:
            # read: verified read of a 300 KB object vs reading the file and hashing it in a thread.
            blob = jpeg(600, 400, quality=95)  # about 300 KB of noise
            [ref] = (await store.admit([Upload.of_bytes(blob)], "user")).attachments
            path = store.blobs.path(Ref.parse(ref.ref))

            def raw() -> bytes:
                data = path.read_bytes()
                Ref.of("sha256", data)
                return data

            subject, floor = await _alternate(
                300, lambda _: store.read(ref.ref), lambda _: asyncio.to_thread(raw)
            )
            results.append(_row("read (service, no HTTP)", len(blob), subject, floor))

            # admit: new images through the whole service (one worker: IPC, fsyncs, index commit) vs the
            # gate's checks and the hash alone, in-process. The gap is the cost of durability and isolation.
            # PNG and WebP alternate; each admission takes a new image so that none is a dedup hit.
            images = [im for i in range(60) for im in (png(640, 400, seed=i), webp(512, 384, seed=i))]
            admitted, inspected = iter(images), iter(images)

            async def admit_one(_: int) -> object:
                return await store.admit([Upload.of_bytes(next(admitted))], "user")

            async def gate_one(_: int) -> object:
                image = next(inspected)
                return inspect(image, None, config.limits), Ref.of("sha256", image)

            subject, floor = await _alternate(20, admit_one, gate_one)
            results.append(_row("admit (service vs gate only)", len(images[0]), subject, floor))
        finally:
            await store.close()
    return results


def _row(name: str, size: int, subject: float, floor: float) -> dict[str, object]:
    return {
        "scenario": name,
        "bytes": size,
        "subject_ms": round(subject * 1000, 3),
        "floor_ms": round(floor * 1000, 3),
        "ratio": round(floor / subject, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    results = asyncio.run(run())
    print(f"{'scenario':32} {'bytes':>9} {'ms/op':>9} {'floor ms':>9} {'of floor':>9}")
    for r in results:
        print(
            f"{r['scenario']!s:32} {r['bytes']!s:>9} {r['subject_ms']!s:>9} {r['floor_ms']!s:>9} "
            f"{float(str(r['ratio'])):>8.0%}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
